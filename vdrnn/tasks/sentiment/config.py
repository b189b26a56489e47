"""Typed, validated views of a sentiment run's config (``data.task=sentiment``: ``dataset=imdb`` or ``dataset=scale``).

The trainer, eval and dropout groups mean what they mean for language models (:mod:`vdrnn.config`), less the keys only
a language model reads (refused here off their defaults); the data and model nodes have their own dataclasses here,
since a classifier has no BPTT and may use a GRU or RNN.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from vdrnn.config import (
    EvalConfig,
    ModelConfig,
    TrainerConfig,
    build,
    check_sections,
    dropout_from,
    eval_from,
    model_from,
    run_settings,
)
from vdrnn.dropout.config import DropoutConfig
from vdrnn.errors import ConfigError

# Settings that only the language model's trainer and MC test read (vdrnn/tasks/lm/): how
# the LM loss is reduced over BPTT steps, CUDA-graph capture of the LM step, NT-ASGD's trigger and whether
# MC masks are kept over a test stream. A sentiment run would ignore them without a word, so any value but
# the default is refused. (trainer.ar and trainer.tar have their own message in from_dict.)
LM_ONLY = {"trainer": ("loss", "cuda_graph", "nonmono", "stop_nonmono"), "eval": ("mc_masks",)}


@dataclass(frozen=True)
class SentimentDataConfig:
    name: str = "imdb"
    task: str = "sentiment"
    reader: str | None = None  # the module that reads the dataset; None: vdrnn/tasks/sentiment/datasets/<name>.py
    root: str | None = None
    batch_size: int = 128
    # Sequences per evaluation pass. MC: each review runs as min(eval.samples, eval.batch) replicas, so a
    # pass holds max(1, eval_batch_size // replicas) reviews (more sequences than this if replicas exceed it).
    eval_batch_size: int = 1000
    max_length: int = 200  # tokens kept per review (IMDB) or per chunk (scale)
    vocab_size: int = 20_000  # including <pad> and <unk>
    valid_fraction: float = 0.1  # of the training reviews, held out for model selection (0: none, trainer.select=last)
    test_fraction: float | None = None  # datasets without a test split (scale): the test share of the reviews
    split_seed: int = 0  # fixes the validation (and scale test) split, independent of `seed`
    limit: int | None = None  # smoke runs: at most this many reviews per IMDB split, or of the scale data in all

    def __post_init__(self) -> None:
        for key in ("batch_size", "eval_batch_size", "max_length"):
            if getattr(self, key) < 1:
                raise ConfigError(f"data.{key}={getattr(self, key)} must be at least 1")
        if self.vocab_size < 3:
            raise ConfigError(f"data.vocab_size={self.vocab_size} must leave room for <pad>, <unk> and words")
        if not 0 <= self.valid_fraction < 1:
            raise ConfigError(f"data.valid_fraction={self.valid_fraction} must be in [0, 1) (0: train on every "
                              f"training review, with trainer.select=last)")
        if self.test_fraction is not None and not 0 < self.test_fraction < 1:
            raise ConfigError(f"data.test_fraction={self.test_fraction} must be in (0, 1) (Gal: 0.2), or null for a "
                              f"dataset with a test split of its own")
        if self.limit is not None and self.limit < 10:
            raise ConfigError(f"data.limit={self.limit} must be at least 10 reviews (or null for all)")


@dataclass(frozen=True)
class SentimentModelConfig(ModelConfig):
    """The language model's ModelConfig with Gal's sentiment sizes, and what a classifier cannot do."""

    num_layers: int = 1
    hidden_size: int = 128  # embedding 128 too (embedding_size: None)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.impl == "fast" and self.cell == "rnn":
            raise ConfigError("model.impl=fast has fused kernels for the LSTM and the GRU; cell=rnn runs its masked "
                              "recurrence on the reference loop: use model.impl=auto")
        if self.tie_weights:
            raise ConfigError("model.tie_weights=true ties a language model's decoder to its embedding; a "
                              "sentiment head has no vocabulary-sized weight to tie: set model.tie_weights=false")


@dataclass(frozen=True)
class SentimentRunConfig:
    data: SentimentDataConfig
    model: SentimentModelConfig
    dropout: DropoutConfig
    trainer: TrainerConfig
    eval: EvalConfig
    seed: int = 1
    device: str = "auto"
    resume: str | None = None
    checkpoint: str | None = None
    ood: str | None = None
    ood_root: str | None = None


def from_dict(raw: dict[str, Any]) -> SentimentRunConfig:
    """Validate a composed config of a sentiment run (a plain dict, e.g. from a checkpoint)."""
    check_sections(raw)
    model = model_from(raw, SentimentModelConfig)
    dropout = dropout_from(raw, model)
    trainer = build(TrainerConfig, raw["trainer"], "trainer")
    if trainer.optimizer not in ("sgd", "adam"):
        raise ConfigError(f"trainer.optimizer={trainer.optimizer} is for language models; sentiment runs take "
                          f"`sgd` or `adam` (Gal: adam)")
    if trainer.ar or trainer.tar:
        raise ConfigError("trainer.ar and trainer.tar are AWD's penalties on a language model's outputs over time; "
                          "a sentiment model reads one step: set them to 0")
    evaluation = eval_from(raw, dropout)
    if trainer.select == "mc" and evaluation.mode != "mc":
        raise ConfigError("trainer.select=mc picks best.pt by the MC-dropout validation score of eval.samples "
                          "passes: add eval=mc (or drop trainer.select=mc to select by weight scaling)")
    for where, config in (("trainer", trainer), ("eval", evaluation)):
        refuse_lm_only(where, config)
    data = build(SentimentDataConfig, raw["data"], "data")
    if data.valid_fraction == 0 and trainer.select != "last":
        raise ConfigError(f"data.valid_fraction=0 holds no validation reviews out, and trainer.select="
                          f"{trainer.select} picks best.pt by a validation score: add trainer.select=last (the last "
                          f"epoch's weights, trainer.epochs a fixed budget), or hold reviews out (default 0.1)")
    if data.valid_fraction == 0 and evaluation.temperature == "fit":
        raise ConfigError("eval.temperature=fit fits the temperature on the validation reviews, and "
                          "data.valid_fraction=0 holds none out: give the temperature (eval.temperature=1.5), or hold "
                          "reviews out (data.valid_fraction=0.1)")
    if raw.get("init_from"):
        raise ConfigError(f"init_from={raw['init_from']}: sentiment runs do not take init_from, which starts a "
                          f"new language-model run (dataset=ptb) from trained weights. Drop it; to continue an "
                          f"interrupted sentiment run, use resume=PATH to its last.pt")
    seed, device = run_settings(raw)
    return SentimentRunConfig(
        data=data,
        model=model,
        dropout=dropout,
        trainer=trainer,
        eval=evaluation,
        seed=seed,
        device=device,
        resume=raw.get("resume"),
        checkpoint=raw.get("checkpoint"),
        ood=raw.get("ood"),
        ood_root=raw.get("ood_root"),
    )


def refuse_lm_only(where: str, config: TrainerConfig | EvalConfig) -> None:
    """A ConfigError for the first language-model-only key of ``config`` (group ``where``) off its default."""
    defaults = {f.name: f.default for f in fields(config)}
    for key in LM_ONLY[where]:
        value = getattr(config, key)
        if value != defaults[key]:
            raise ConfigError(f"{where}.{key}={value} is for language models (dataset=ptb); a sentiment run never "
                              f"reads it: drop the override (default: {where}.{key}={defaults[key]})")
