"""Every config group option and every experiment preset composes and validates."""

from __future__ import annotations

import json
import re
from importlib import resources

import pytest
from omegaconf import OmegaConf

from tests.helpers import TINY, composed
from vdrnn import help as help_text
from vdrnn.config import to_container
from vdrnn.errors import ConfigError
from vdrnn.eval_settings import eval_config
from vdrnn.tasks import task_of
from vdrnn.tasks.lm.config import from_dict
from vdrnn.tasks.sentiment import config as sentiment_config
from vdrnn.training.tracking import flatten

CONF = resources.files("vdrnn.conf")
GROUPS = {g: sorted(p.name[:-5] for p in CONF.joinpath(g).iterdir() if p.name.endswith(".yaml"))
          for g in ("dataset", "model", "cell", "dropout", "eval", "experiment")}
# Gal & Ghahramani's Table 1 rows; the Gaussian presets share their names' form but are not rows of it.
GAUSSIAN = [p for p in GROUPS["experiment"] if p.startswith(("medium_", "large_")) and "_gaussian" in p]
LEARNED = [p for p in GAUSSIAN if p.endswith("_learned")]  # Kingma's adaptive alpha on a Gaussian preset
# The schemes after the paper, each on Table 1's medium model (no Table 1 row, no paper numbers for that size).
BEYOND = [p for p in GROUPS["experiment"] if p in ("medium_zoneout", "medium_semeniuta", "medium_concrete")]
TABLE1 = [p for p in GROUPS["experiment"] if p.startswith(("medium_", "large_")) and p not in GAUSSIAN + BEYOND]


def validated(cfg):
    """Validate as `vdrnn train` does: through the run's task (its dataset's data.task)."""
    raw = to_container(cfg)
    return task_of(raw).parse(raw)


SENTIMENT_PRESETS = [f"{data}_{cell}_{scheme}" for data in ("imdb", "scale") for cell in ("lstm", "gru")
                     for scheme in ("none", "zaremba", "variational")]
# Options that only make sense with a sentiment dataset (the language model is an LSTM).
NEEDS_SENTIMENT = {("cell", "gru"), ("cell", "rnn")}

# A preset's header: `# @package _global_`, one line saying what it is, the command, and what it gives, in this form
# (the Expect text may go on over one more line, or a `#   Note:` line may follow it).
RUN, EXPECT, MORE, NOTE = "#   Run:    vdrnn train experiment=", "#   Expect: ", "#           ", "#   Note:   "
# How vdrnn's measured numbers start the Expect text, by dataset (after "with <override>: " where they need one);
# "± std" where there are several seeds.
PM = r"( ± \d+\.\d+)?"
MEASURED = {"ptb": rf"val \d+\.\d{PM}, test \d+\.\d{PM}", "imdb": rf"test accuracy \d+\.\d+{PM}%",
            "scale": r"test RMSE 0\.\d{3}"}
MEASURED["wikitext2"] = MEASURED["ptb"]
NOT_YET = "no GPU run yet; "  # how a preset whose row has no run behind it says so, before the published numbers


def header(preset: str) -> tuple[list[str], str]:
    """The header lines of ``preset``'s file after `# @package _global_`, and its Expect text (continuation joined)."""
    lines = CONF.joinpath("experiment", f"{preset}.yaml").read_text().splitlines()
    assert lines[0] == "# @package _global_", preset
    lines = lines[1:next(i for i, line in enumerate(lines) if not line.startswith("#"))]
    expect = [line for line in lines if line.startswith(EXPECT)]
    assert len(expect) == 1, (preset, lines)
    start = lines.index(expect[0])
    more = [line[len(MORE):] for line in lines[start + 1:start + 2] if line.startswith(MORE)]
    return lines, " ".join([expect[0][len(EXPECT):], *more])


def assert_header_runs(preset: str) -> str:
    """The header names the preset, gives the command that runs it and what that gives; returns the Expect text."""
    lines, expect = header(preset)
    assert 3 <= len(lines) <= 4, lines
    title, run, expect_line, *rest = lines
    assert re.fullmatch(r"# [^ ].+", title), title
    assert run.startswith(RUN) and run[len(RUN):].split(" ")[0] == preset, run
    assert expect_line.startswith(EXPECT) and expect_line[len(EXPECT):].strip(), expect_line
    assert all(line.startswith((MORE, NOTE)) and line[len(MORE):].strip() for line in rest), rest
    return expect


def test_groups_have_the_options_the_paper_needs():
    assert set(GROUPS["dropout"]) >= {"none", "zaremba", "moon", "moon_emb", "variational", "variational_untied"}
    assert set(GROUPS["model"]) >= {"small", "medium", "large", "awd"}
    assert set(GROUPS["eval"]) == {"scale", "mc"}
    rows = {"none", "moon", "moon_emb", "zaremba", "variational", "variational_untied"}
    assert set(TABLE1) == {f"{size}_{row}" for size in ("medium", "large") for row in rows}
    assert "awd_ptb" in GROUPS["experiment"]


def test_groups_have_the_sentiment_options():
    assert {"imdb", "scale"} <= set(GROUPS["dataset"]) and "sentiment" in GROUPS["model"]
    assert set(GROUPS["cell"]) == {"lstm", "gru", "rnn"}
    assert set(SENTIMENT_PRESETS) <= set(GROUPS["experiment"])


@pytest.mark.parametrize("group,option", [(g, o) for g, opts in GROUPS.items() for o in opts])
def test_every_option_composes_validates_and_explains_its_keys(group, option):
    """Each option gives a valid run config, and `vdrnn train --help` can explain each of its keys by a comment in
    conf/ (a key added without one fails here; a key under a described one, as paper.row under paper, is covered)."""
    extra = ["dataset=imdb", "model=sentiment"] if (group, option) in NEEDS_SENTIMENT else []
    raw, choices = help_text.composed([*extra, f"{group}={option}"])
    cfg = validated(raw)
    if group == "dataset":
        assert cfg.data.name == option
    elif extra:
        assert cfg.data.name == "imdb"
    described = help_text.descriptions(choices)
    undescribed = [key for key in flatten(OmegaConf.to_container(raw))
                   if not any(".".join(key.split(".")[:n]) in described for n in range(1, key.count(".") + 2))]
    assert undescribed == []


@pytest.mark.parametrize("cell,dropout", [
    (cell, dropout) for cell in ("lstm", "gru", "rnn")
    for dropout in ("none", "zaremba", "variational", "variational_untied", "gaussian", "gaussian_untied")
    if not (cell == "rnn" and dropout.endswith("_untied"))  # one gate: refused, see below
])
def test_sentiment_runs_every_cell_with_every_applicable_scheme(cell, dropout):
    cfg = validated(composed("dataset=imdb", "model=sentiment", f"cell={cell}", f"dropout={dropout}"))
    assert (cfg.model.cell, cfg.model.hidden_size, cfg.trainer.optimizer) == (cell, 128, "adam")
    assert cfg.dropout.per_gate == dropout.endswith("_untied")


@pytest.mark.parametrize("dropout", ["variational_untied", "gaussian_untied"])
def test_untied_gates_on_the_one_gate_rnn_are_refused(dropout):
    # Untied masks of a one-gate cell are the tied masks: the setting would change nothing but the speed.
    with pytest.raises(ConfigError, match="cell.gates=untied .* cell=rnn has one gate.* Use cell.gates=tied"):
        validated(composed("dataset=imdb", "cell=rnn", f"dropout={dropout}"))


@pytest.mark.parametrize("extra", [[], ["dataset=imdb"]])
@pytest.mark.parametrize("dropout", ["none", "zaremba", "moon", "awd"])
def test_untied_gates_with_a_scheme_without_per_gate_masks_are_refused(dropout, extra):
    with pytest.raises(ConfigError, match=f"cell.gates=untied .* scheme '{dropout}' would ignore it. Use "
                                          f"cell.gates=tied, or dropout=variational_untied"):
        validated(composed(*extra, f"dropout={dropout}", "cell.gates=untied"))


@pytest.mark.parametrize("overrides", [["dataset=imdb", "dropout=zaremba", "dropout.hidden=0.3"],
                                       ["model.num_layers=1", "dropout.hidden=0.2"],
                                       ["dataset=imdb", "dropout=awd"]])
def test_dropout_between_layers_of_a_one_layer_model_is_refused(overrides):
    with pytest.raises(ConfigError, match=r"dropout.hidden=0.\d drops the inputs of layers 2..L, and "
                                          r"model.num_layers=1 has none: set dropout.hidden=null"):
        validated(composed(*overrides))


def test_dropout_between_layers_is_taken_with_two_layers_or_at_zero():
    assert validated(composed("dataset=imdb", "model.num_layers=2", "dropout.hidden=0.3")).dropout.hidden == 0.3
    assert validated(composed("dataset=imdb", "dropout.hidden=0")).dropout.hidden == 0


@pytest.mark.parametrize("cell", ["gru", "rnn"])
def test_moon_on_a_cell_without_cell_state_is_refused(cell):
    with pytest.raises(ConfigError, match=f"dropout=moon cannot run on cell={cell}"):
        validated(composed("dataset=imdb", f"cell={cell}", "dropout=moon"))


@pytest.mark.parametrize("preset", SENTIMENT_PRESETS)
def test_sentiment_presets_follow_gals_scripts_and_name_their_command(preset):
    data, cell, scheme = preset.split("_")
    cfg = validated(composed(f"experiment={preset}"))
    assert (cfg.data.name, cfg.model.cell, cfg.dropout.scheme) == (data, cell, scheme)
    assert (cfg.model.hidden_size, cfg.data.batch_size, cfg.data.max_length, cfg.data.vocab_size) == (128, 128, 200, 20000)
    assert (cfg.trainer.optimizer, cfg.trainer.lr, cfg.trainer.weight_decay) == ("adam", 1e-3, 2e-6)
    if scheme == "variational":
        d = cfg.dropout
        assert d.embedding == d.input == d.recurrent == d.output == 0.5
    if scheme != "none":
        assert cfg.eval.mode == "mc" and cfg.eval.samples == 50
    if data == "scale":
        assert cfg.data.test_fraction == 0.2
    assert re.match(rf"(with [\w.=]+: )?{MEASURED[data]}", assert_header_runs(preset))


@pytest.mark.parametrize("preset", GROUPS["experiment"])
def test_every_preset_header_gives_its_command_and_the_numbers_to_expect(preset):
    """Run and Expect lines; vdrnn's measured numbers with their seeds and GPU; the paper's where it has a row."""
    expect = assert_header_runs(preset)
    cfg = composed(f"experiment={preset}")
    if cfg.paper is not None and cfg.paper.valid is not None:
        assert f"val {cfg.paper.valid}, test {cfg.paper.test}" in expect, expect
        if cfg.paper.test_mc is not None:
            assert f"MC test {cfg.paper.test_mc}" in expect, expect
    if expect.startswith(NOT_YET):  # a row of a table still to be filled: nothing measured to state
        assert cfg.data.name == "wikitext2", expect
        return
    measured = expect.split("paper:")[0].split("reference README")[0]  # vdrnn's numbers come first
    assert re.match(rf"(with [\w.=]+: )?{MEASURED[cfg.data.name]}", measured), measured
    assert re.search(r"\b\d+ seeds?\b", measured) and re.search(r"\bH[12]00\b", measured), measured
    if cfg.data.name == "ptb" and cfg.eval.mode == "mc":
        assert re.search(r"MC test \d+\.\d", measured), measured
    text = CONF.joinpath("experiment", f"{preset}.yaml").read_text()
    # Of the project and its users only: no history of how its numbers were made, no folder of results.
    assert not re.search("|".join(("ses" + "sion", "lea" + "se", "device " + "tool", "the " + "issue", r"\.\./sha" + "red",
                                   r"\.dev" + "data", "results/")), text, re.IGNORECASE)


def test_defaults_are_the_medium_variational_model():
    cfg = from_dict(to_container(composed()))
    assert (cfg.model.num_layers, cfg.model.hidden_size, cfg.dropout.scheme) == (2, 650, "variational")
    assert (cfg.data.batch_size, cfg.data.bptt, cfg.trainer.lr) == (20, 35, 1.0)


def test_untied_preset_sets_per_gate_masks():
    cfg = from_dict(to_container(composed("dropout=variational_untied")))
    assert cfg.model.gates == "untied" and cfg.dropout.per_gate and cfg.dropout.scheme == "variational"


@pytest.mark.parametrize("preset", TABLE1)
def test_presets_carry_paper_numbers_and_a_run_command(preset):
    cfg = composed(f"experiment={preset}")
    size, row = preset.split("_", 1)
    assert cfg.paper.size == size and cfg.paper.test > 0 and cfg.model.hidden_size == {"medium": 650, "large": 1500}[size]
    expect = assert_header_runs(preset)
    assert f"; paper: val {cfg.paper.valid}, test {cfg.paper.test}" in expect, expect
    if row.startswith("variational"):
        assert cfg.eval.mode == "mc" and cfg.paper.test_mc is not None


@pytest.mark.parametrize("preset", BEYOND)
def test_the_schemes_after_the_paper_run_on_table_1s_medium_model_beside_its_rows(preset):
    """Zaremba's medium model and schedule, the scheme's own dropout group, no paper numbers of that size."""
    assert len(BEYOND) == 3
    cfg = validated(composed(f"experiment={preset}"))
    medium = validated(composed("experiment=medium_zaremba"))
    assert cfg.dropout.scheme == preset.removeprefix("medium_") and cfg.model == medium.model
    assert cfg.trainer.epochs == medium.trainer.epochs == 39 and cfg.trainer.lr_decay == medium.trainer.lr_decay
    assert composed(f"experiment={preset}").paper is None
    expect = assert_header_runs(preset)
    assert re.match(rf"{MEASURED['ptb']} \(\d seeds?, H[12]00[^)]*\)", expect), expect


@pytest.mark.parametrize("preset", [p for p in GAUSSIAN if p not in LEARNED])
def test_gaussian_presets_are_gals_variational_presets_with_gaussian_noise(preset):
    """Each lists only what differs from the variational row it is named after: the noise, and no paper numbers."""
    assert len(GAUSSIAN) - len(LEARNED) == 4
    gaussian = to_container(composed(f"experiment={preset}"))
    variational = to_container(composed(f"experiment={preset.replace('gaussian', 'variational')}"))
    assert gaussian["dropout"].pop("scheme") == "gaussian" and variational["dropout"].pop("scheme") == "variational"
    assert gaussian.pop("paper") is None and variational.pop("paper")["table"] == 1
    assert gaussian == variational
    assert re.match(rf"{MEASURED['ptb']}, MC test \d+\.\d{PM} \(\d+ seeds?, H[12]00", assert_header_runs(preset))


@pytest.mark.parametrize("preset", LEARNED)
def test_learned_alpha_presets_are_their_gaussian_presets_learning_alpha(preset):
    assert len(LEARNED) == 2
    learned = to_container(composed(f"experiment={preset}"))
    fixed = to_container(composed(f"experiment={preset.removesuffix('_learned')}"))
    assert learned["dropout"].pop("learn_alpha") is True and fixed["dropout"].pop("learn_alpha") is False
    assert learned == fixed
    validated(composed(f"experiment={preset}"))
    assert re.match(rf"{MEASURED['ptb']}, MC test \d+\.\d{PM} \(\d+ seeds?, H[12]00", assert_header_runs(preset))


def test_large_presets_use_gal_and_zaremba_settings():
    gal = from_dict(to_container(composed("experiment=large_variational")))
    assert (gal.dropout.embedding, gal.dropout.input, gal.dropout.recurrent, gal.dropout.output) == (0.3, 0.5, 0.3, 0.5)
    assert (gal.trainer.epochs, gal.trainer.lr_decay, gal.trainer.lr_decay_start) == (55, 1.15, 10)
    assert (gal.trainer.weight_decay, gal.trainer.weight_decay_mode, gal.model.init_range) == (1e-7, "gal", 0.04)
    # Not Gal's clip 10: the tied and the untied model both diverge with it at some seeds, and take 5 (the presets).
    untied = from_dict(to_container(composed("experiment=large_variational_untied")))
    assert (untied.trainer.clip, gal.trainer.clip) == (5.0, 5.0)
    zaremba = from_dict(to_container(composed("experiment=large_zaremba")))
    assert zaremba.dropout.input == zaremba.dropout.output == 0.65 and zaremba.trainer.lr_decay_start == 14


def test_awd_preset_has_the_reference_readme_settings():
    awd = from_dict(to_container(composed("experiment=awd_ptb")))
    d, m, t = awd.dropout, awd.model, awd.trainer
    assert (d.embedding, d.input, d.hidden, d.output, d.weight) == (0.1, 0.4, 0.25, 0.4, 0.5)
    assert (d.embedding_mask, d.locked_mask) == ("batch", "sample")
    assert (m.num_layers, m.hidden_size, m.embedding_size, m.tie_weights) == (3, 1150, 400, True)
    assert (t.optimizer, t.lr, t.clip, t.weight_decay, t.weight_decay_mode, t.ar, t.tar) == \
        ("ntasgd", 30.0, 0.25, 1.2e-6, "l2", 2.0, 1.0)
    assert (awd.data.bptt, awd.data.variable_bptt, awd.data.batch_size, awd.data.eval_batch_size,
            awd.data.test_batch_size, awd.seed) == (70, True, 20, 10, 1, 141)


def test_lr_schedule_matches_zaremba_medium():
    trainer = from_dict(to_container(composed("model=medium"))).trainer
    # Zaremba's main.lua: `if epoch > max_epoch then lr = lr / decay` at the end of each epoch (max_epoch 6).
    assert [trainer.lr_at(e) for e in (1, 6, 7)] == [1.0, 1.0, 1.0]
    assert trainer.lr_at(8) == pytest.approx(1 / 1.2) and trainer.lr_at(39) == pytest.approx(1.2 ** -32)


@pytest.mark.parametrize("override,message", [
    ("dropout.recurrent=1.0", r"dropout.recurrent=1.0 is not a probability in \[0, 1\)"),
    ("trainer.amp=fp8", "trainer.amp='fp8'; choose one of off, bf16, fp16"),
    ("model.impl=cuda", "model.impl='cuda'; choose one of auto, fast, reference"),
    ("cell.gates=half", "cell.gates='half'"),
    ("model.num_layers=0", "model.num_layers=0 must be at least 1"),
    ("model.hidden_size=-3", "model.hidden_size=-3 must be at least 1"),
    ("model.embedding_size=0", "model.embedding_size=0 must be at least 1, or null for the hidden size"),
    ("dropout.input=false", "dropout.input=False must be a number"),
    ("dropout.kl_weight=true", "dropout.kl_weight=True must be a number"),
    ("eval.mode=bayes", "eval.mode='bayes'"),
    # Values of the wrong type, named before they fail later as a bare TypeError or ValueError:
    ("seed=abc", "seed='abc' must be an integer"),
    ("trainer.epochs=abc", "trainer.epochs='abc' must be an integer"),
    ("trainer.lr=true", "trainer.lr=True must be a number"),
    # YAML reads a bare off as false: `amp: off` in a preset file arrives as False. The words the key takes are named.
    ("trainer.amp=false", r'trainer.amp=False; choose one of off, bf16, fp16 \(YAML reads a bare off, on, no or yes '
                          r'as true/false: quote the word, e.g. amp: "off"\)'),
    ("trainer.select=true", r"trainer.select=True; choose `scale`.*\(YAML reads a bare off, on, no or yes"),
    ("trainer.cuda_graph=true", r"trainer.cuda_graph=True; choose `auto` or `off` \(YAML reads a bare off"),
    ("data.root=true", "data.root=True must be a string or null"),  # a path: no words to name
    ("trainer.max_minutes=soon", "trainer.max_minutes='soon' must be a number or null"),
    ("eval.word_dropout=1", "eval.word_dropout=1 must be true or false"),
    ("dataset=imdb data.max_length=long", "data.max_length='long' must be an integer"),
    # NaN compares false with everything, so a check written `clip <= 0` would let it through.
    ("trainer.clip=nan", r"trainer.clip=nan must be > 0"),
    ("trainer.weight_decay=-1e-4", r"trainer.weight_decay=-0.0001 must be >= 0"),
    ("trainer.log_every=0", "trainer.log_every=0 must be at least 1"),
    ("trainer.lr=0", "trainer.lr=0 must be > 0"),
    ("trainer.max_steps=0", "trainer.epochs and trainer.max_steps must be at least 1"),
    ("trainer.max_minutes=nan", "trainer.max_minutes=nan must be positive"),
    ("trainer.nonmono=0", "trainer.nonmono >= 1"),
    ("trainer.tar=-1", "trainer.tar >= 0"),
    ("data.test_batch_size=0", "data.test_batch_size=0 must be at least 1"),
    ("data.eval_max_tokens=1", "data.eval_max_tokens=1 must be at least 2 tokens"),
    ("+trainer.lr_warmup=5", r"unknown key\(s\) trainer.lr_warmup; known: .*lr_decay"),
    # Set from the cell group, where the group's own key would be overwritten without a word:
    ("+dropout.per_gate=true", r"unknown key\(s\) dropout.per_gate; known: (?!.*per_gate,).*; dropout.per_gate "
                               r"follows cell.gates=untied"),
    ("+model.cell=gru", r"unknown key\(s\) model.cell; known: .*; model.cell follows cell=lstm\|gru\|rnn"),
    # Hydra's hint for a mistyped group, followed: the key would be appended and read by nothing.
    ("+datset=imdb", r"unknown key\(s\) datset; known: cell, checkpoint, .*chosen without a `\+`, e.g. dataset=imdb"),
    ("dataset=imdb +datset=imdb", r"unknown key\(s\) datset"),
    ("trainer.epochs=null", "trainer.epochs=None must be an integer"),
    ("trainer.select=best", "trainer.select='best'; choose `scale`"),
    ("trainer.select=mc eval=mc", "a language model keeps the epoch of best weight-scaling validation perplexity"),
    ("dataset=imdb trainer.select=mc", r"trainer.select=mc picks best.pt by the MC-dropout validation score.*add eval=mc"),
    ("dataset=imdb data.valid_fraction=0", r"data.valid_fraction=0 holds no validation reviews out, and "
                                           r"trainer.select=scale picks .*add trainer.select=last"),
    ("dataset=imdb data.valid_fraction=1 trainer.select=last", r"data.valid_fraction=1 must be in \[0, 1\)"),
])
def test_bad_values_are_refused_with_the_fix(override, message):
    with pytest.raises(ConfigError, match=message):
        validated(composed(*override.split()))


def test_a_step_cap_or_capped_data_makes_a_smoke_run():
    from vdrnn.tasks import task_of

    def is_smoke(raw):
        return task_of(raw).is_smoke(raw)

    assert not is_smoke(to_container(composed()))
    for override in ("trainer.max_steps=5", "data.eval_max_tokens=1000", "dataset=imdb data.limit=100"):
        assert is_smoke(to_container(composed(*override.split()))), override


def test_config_round_trips_through_the_json_that_metrics_json_stores():
    """A run's config read back from metrics.json (or a checkpoint's config) builds the same typed config: what
    `vdrnn eval` and resume rely on."""
    raw = to_container(composed("experiment=medium_zaremba", "seed=3"))
    assert from_dict(json.loads(json.dumps(raw))) == from_dict(raw)


def test_eval_runs_the_checkpoints_config_with_the_command_lines_evaluation_settings():
    trained = to_container(composed("experiment=imdb_lstm_variational", "model.hidden_size=64", "eval.samples=7",
                                    "data.eval_batch_size=500"))
    given = {"checkpoint", "eval", "eval.samples", "data.eval_batch_size", "hydra.run.dir"}
    line = to_container(composed("checkpoint=x.pt", "eval=mc", "eval.samples=3", "data.eval_batch_size=40"))
    merged = eval_config(line, trained, given)
    assert merged["model"]["hidden_size"] == 64 and merged["data"]["name"] == "imdb"  # the checkpoint's
    assert merged["eval"]["samples"] == 3 and merged["data"]["eval_batch_size"] == 40  # the command line's
    assert merged["checkpoint"] == "x.pt" and merged["data"]["vocab_size"] == trained["data"]["vocab_size"]
    not_given = eval_config(line, trained, {"checkpoint", "eval"})
    assert not_given["data"]["eval_batch_size"] == 500  # a default of the command line does not replace it
    assert not_given["eval"]["samples"] == 7  # eval=mc picks the mode, not conf/eval/mc.yaml's 1,000 samples
    sentiment_config.from_dict(merged)


def test_eval_without_evaluation_settings_runs_the_checkpoints_own():
    # The IMDB preset's MC: 50 passes with word-type dropout on, where conf/eval/mc.yaml has 1,000 and off.
    trained = to_container(composed("experiment=imdb_lstm_variational"))
    line = to_container(composed("checkpoint=x.pt"))
    assert line["eval"]["mode"] == "scale" and trained["eval"] == {**trained["eval"], "samples": 50,
                                                                   "word_dropout": True, "mode": "mc"}
    assert eval_config(line, trained, {"checkpoint"})["eval"] == trained["eval"]
    switched = eval_config(to_container(composed("checkpoint=x.pt", "eval=scale")), trained, {"checkpoint", "eval"})
    assert switched["eval"] == {**trained["eval"], "mode": "scale"}
    changed = eval_config(to_container(composed("checkpoint=x.pt", "eval.word_dropout=false")), trained,
                          {"checkpoint", "eval.word_dropout"})
    assert changed["eval"] == {**trained["eval"], "word_dropout": False}
    older = {**trained, "eval": {"mode": "mc", "samples": 50}}  # a checkpoint from before eval.mc_masks existed
    assert eval_config(line, older, {"checkpoint"})["eval"]["mc_masks"] == line["eval"]["mc_masks"]


def test_eval_takes_the_progress_bars_setting_and_keeps_another_dataset_s_data_root():
    trained = to_container(composed("trainer.progress=true"))
    trained["data"].update(name="mycorpus", root="/data/mycorpus")  # what a corpus's own YAML set
    line = to_container(composed("checkpoint=x.pt", "trainer.progress=false"))
    merged = eval_config(line, trained, {"checkpoint", "trainer.progress"})
    assert merged["trainer"]["progress"] is False and merged["data"]["root"] == "/data/mycorpus"
    given = eval_config(to_container(composed("checkpoint=x.pt", "data.root=/elsewhere")), trained,
                        {"checkpoint", "data.root"})
    assert given["data"]["root"] == "/elsewhere"
    ptb = eval_config(line, {**trained, "data": {**trained["data"], "name": "ptb"}}, {"checkpoint"})
    assert ptb["data"]["root"] is None  # PTB's own: found through $VDRNN_DATA_DIR on this machine


def test_progress_bars_are_auto_true_or_false():
    assert to_container(composed())["trainer"]["progress"] == "auto"
    with pytest.raises(ConfigError, match="trainer.progress='sometimes'; choose auto"):
        from_dict(to_container(composed("trainer.progress=sometimes")))


@pytest.mark.parametrize("given", [{"model.hidden_size"}, {"dataset"}, {"dropout.recurrent", "data.batch_size"}])
def test_eval_refuses_settings_it_would_ignore(given):
    trained = to_container(composed())
    with pytest.raises(ConfigError, match="runs the checkpoint under the settings it was trained with"):
        eval_config(to_container(composed()), trained, {"checkpoint", *given})


def test_eval_of_a_sentiment_checkpoint_refuses_the_language_model_s_data_keys():
    """data.eval_max_tokens and data.test_batch_size are PTB's: a sentiment checkpoint is refused them by vdrnn eval,
    naming why (not by the sentiment config's unknown-key error, after the merge), and told the keys it takes."""
    trained = to_container(composed("experiment=imdb_lstm_variational"))
    line = to_container(composed("checkpoint=x.pt", "data.eval_max_tokens=500", "data.eval_batch_size=64"))
    with pytest.raises(ConfigError, match=r"data.eval_max_tokens would be ignored: drop it \(data.eval_max_tokens: "
                                          r"language models only, and this checkpoint was trained on imdb\). It takes .*"
                                          r"and where given eval, data.eval_batch_size, trainer.amp, model.impl, trainer.progress$"):
        eval_config(line, trained, {"checkpoint", "data.eval_max_tokens", "data.eval_batch_size"})
    assert eval_config(line, trained, {"checkpoint", "data.eval_batch_size"})["data"]["eval_batch_size"] == 64
    ptb = to_container(composed())
    assert eval_config(line, ptb, {"checkpoint", "data.eval_max_tokens"})["data"]["eval_max_tokens"] == 500


def test_eval_refuses_mc_keys_for_a_weight_scaling_evaluation():
    """eval.samples with a checkpoint trained under eval=scale (or with eval=scale given) would change nothing."""
    trained = to_container(composed())  # eval=scale
    with pytest.raises(ConfigError, match=r"eval.samples is for MC dropout, and this evaluation is weight scaling "
                                          r"\(eval=scale, the checkpoint's\): add eval=mc, or drop it$"):
        eval_config(to_container(composed("eval.samples=10")), trained, {"checkpoint", "eval.samples"})
    mc = eval_config(to_container(composed("eval=mc", "eval.samples=10")), trained, {"checkpoint", "eval", "eval.samples"})
    assert (mc["eval"]["mode"], mc["eval"]["samples"]) == ("mc", 10)
    preset = to_container(composed("experiment=imdb_lstm_variational"))  # eval=mc
    with pytest.raises(ConfigError, match=r"eval.batch, eval.samples are for MC dropout.*\(eval=scale, given\): "
                                          r"add eval=mc, or drop them$"):
        eval_config(to_container(composed("eval=scale", "eval.samples=10", "eval.batch=5")), preset,
                    {"checkpoint", "eval", "eval.samples", "eval.batch"})


def changed_keys(base: str, preset: str) -> set[str]:
    a, b = (flatten(to_container(composed(f"experiment={p}"))) for p in (base, preset))
    return {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_the_tuned_imdb_presets_are_gals_variational_models_with_only_their_tuning_changed(cell):
    preset = f"imdb_{cell}_variational_tuned"
    assert changed_keys(f"imdb_{cell}_variational", preset) == {
        "data.max_length", "model.hidden_size", "trainer.epochs", "trainer.ema", "eval.word_dropout"}
    cfg = validated(composed(f"experiment={preset}"))
    assert (cfg.model.hidden_size, cfg.trainer.ema, cfg.dropout.recurrent) == (512, 0.9995, 0.5)
    assert_header_runs(preset)


def test_the_gal_protocol_preset_trains_on_every_training_review_and_keeps_the_last_epoch():
    preset = "imdb_lstm_variational_gal_protocol"
    assert changed_keys("imdb_lstm_variational_tuned", preset) == {
        "data.valid_fraction", "trainer.select", "dropout.embedding"}
    cfg = validated(composed(f"experiment={preset}"))
    assert (cfg.data.valid_fraction, cfg.trainer.select, cfg.dropout.embedding) == (0, "last", 0.45)
    assert_header_runs(preset)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_the_tuned_imdb_gaussian_presets_change_only_the_noise(cell):
    preset = f"imdb_{cell}_gaussian_tuned"
    assert changed_keys(f"imdb_{cell}_variational_tuned", preset) == {"dropout.scheme"}
    assert validated(composed(f"experiment={preset}")).dropout.scheme == "gaussian"
    assert_header_runs(preset)


def test_a_true_or_false_where_a_word_goes_is_refused_even_where_the_group_takes_any_word():
    """build() leaves a bool in a string field to the group's own check, which names the words it takes; a group
    without one (any word goes) still gets the type error, not the bool."""
    from dataclasses import dataclass

    from vdrnn.config import build

    @dataclass
    class Named:
        name: str = "x"

    assert build(Named, {"name": "off"}, "group").name == "off"
    with pytest.raises(ConfigError, match=r'group.name=False must be a string \(YAML reads a bare off'):
        build(Named, {"name": False}, "group")



@pytest.mark.parametrize("override,message", [
    ("seed=${nope}", "seed cannot be resolved (Interpolation key 'nope' not found): give it a value"),
    ("data.root=${oc.env:VDRNN_UNSET_VARIABLE}", "data.root cannot be resolved (KeyError raised while resolving "
                                                 "interpolation: \"Environment variable 'VDRNN_UNSET_VARIABLE' not found\")"),
    ("seed=99999999999999999999", "seed=99999999999999999999 is outside the seeds torch takes"),
    ("data.reader=os", "data.reader=os is not a dataset reader: it has no read(data) function"),
    ("paper=Table1", "paper='Table1': a str, where a mapping with row, size and the paper's numbers goes"),
    ("checkpoint=run/best.pt", "checkpoint=run/best.pt is what `vdrnn eval` scores, and `vdrnn train` would ignore"),
    ("model.hidden_size=100000000", "model.hidden_size=100000000 and model.num_layers=2 make a model of "),
], ids=["unknown-key", "unset-variable", "huge-seed", "reader-of-no-dataset", "paper-string", "train-checkpoint",
        "model-too-large"])
def test_a_command_line_that_cannot_run_is_refused_in_one_line(tmp_path, tiny_corpus, override, message):
    """Refused as the config is checked, or as the run starts (the reader imported, the model's size known), in a
    VdrnnError: the CLI's one line with status 2, not a traceback."""
    from tests.helpers import train
    from vdrnn.cli import checked_config

    with pytest.raises(ConfigError) as refused:
        raw = checked_config([*TINY, f"data.root={tiny_corpus}", "trainer.max_steps=1", override])
        train(raw, tmp_path / "run")
    assert message in str(refused.value) and len(str(refused.value).splitlines()) == 1
