"""Typed, validated views of a language-model run's config (``data.task=lm``, e.g. ``dataset=ptb``)."""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class LMDataConfig:
    name: str = "ptb"
    task: str = "lm"
    reader: str | None = None  # the module that reads the dataset; None: vdrnn/tasks/lm/datasets/<name>.py
    root: str | None = None
    batch_size: int = 20
    bptt: int = 35
    eval_batch_size: int = 20
    test_batch_size: int = 1
    eval_max_tokens: int | None = None
    variable_bptt: bool = False
    allow_custom_corpus: bool = False

    def __post_init__(self) -> None:
        for key in ("batch_size", "bptt", "eval_batch_size", "test_batch_size"):
            if getattr(self, key) < 1:
                raise ConfigError(f"data.{key}={getattr(self, key)} must be at least 1")
        if self.eval_max_tokens is not None and self.eval_max_tokens < 2:
            raise ConfigError(f"data.eval_max_tokens={self.eval_max_tokens} must be at least 2 tokens (or null for "
                              f"the whole validation and test sets)")


@dataclass(frozen=True)
class LMRunConfig:
    data: LMDataConfig
    model: ModelConfig
    dropout: DropoutConfig
    trainer: TrainerConfig
    eval: EvalConfig
    seed: int = 1
    device: str = "auto"
    resume: str | None = None
    checkpoint: str | None = None
    init_from: str | None = None
    ood: str | None = None
    ood_root: str | None = None


def from_dict(raw: dict[str, Any]) -> LMRunConfig:
    """Validate a composed config (a plain dict, e.g. from ``to_container`` or a checkpoint)."""
    check_sections(raw)
    model = model_from(raw)
    if model.cell != "lstm":
        raise ConfigError(f"cell={model.cell} is for the sentiment datasets; the language model is an LSTM: "
                          f"use `cell=lstm`, or `dataset=imdb`/`dataset=scale` with this cell")
    dropout = dropout_from(raw, model)
    trainer = build(TrainerConfig, raw["trainer"], "trainer")
    if trainer.select == "mc":
        raise ConfigError("trainer.select=mc validates every epoch with MC dropout, which vdrnn does for the sentiment "
                          "tasks (dataset=imdb|scale); a language model keeps the epoch of best weight-scaling "
                          "validation perplexity, as Zaremba's and Gal's code: drop trainer.select=mc")
    seed, device = run_settings(raw)
    return LMRunConfig(
        data=build(LMDataConfig, raw["data"], "data"),
        model=model,
        dropout=dropout,
        trainer=trainer,
        eval=eval_from(raw, dropout),
        seed=seed,
        device=device,
        resume=raw.get("resume"),
        init_from=raw.get("init_from"),
        checkpoint=raw.get("checkpoint"),
        ood=raw.get("ood"),
        ood_root=raw.get("ood_root"),
    )
