"""What a run writes besides checkpoints: TensorBoard events, metrics.jsonl (per epoch), metrics.json (final).

Each run's output dir is its own TensorBoard run, so ``tensorboard --logdir <sweep dir>`` lists one
run per job. The hparams table is written into that run's own event file (``SummaryWriter.add_hparams``
would create an extra run per call), by each start of the run (a resumed run writes a new event file, which then
holds its config beside its end), each key with its description from conf/ and booleans as booleans; its end status
only once the run has ended: SUCCESS when it finished, FAILURE when it failed, none while it runs or is stopped to go
on later. metrics.json says the same from the start
(``"status": "running"``) to the end (``finished``, ``failed`` or ``stopped``, with the reason).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboard.plugins.hparams import metadata
from tensorboard.plugins.hparams.api_pb2 import (
    DataType,
    Experiment,
    HParamInfo,
    MetricInfo,
    MetricName,
    Status,
)
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData, SessionEndInfo, SessionStartInfo
from torch.utils.tensorboard import SummaryWriter

from vdrnn.errors import RecordError
from vdrnn.files import append_line, os_error_in, write_atomically, write_error

log = logging.getLogger("vdrnn")


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}, with values TensorBoard's hparams accept (None -> "null")."""
    flat = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, name + "."))
        elif isinstance(value, (bool, int, float, str)):
            flat[name] = value
        else:
            flat[name] = "null" if value is None else str(value)
    return flat


def described(config: dict[str, Any]) -> dict[str, str]:
    """Each key's description, from the comments in conf/ of the files the run's config was composed from (its
    dataset, cell and eval options, where the config names them; conf/config.yaml documents the rest)."""
    from vdrnn.help import descriptions, groups

    options = groups()
    named = {"dataset": (config.get("data") or {}).get("name"), "cell": (config.get("cell") or {}).get("type"),
             "eval": (config.get("eval") or {}).get("mode")}
    return descriptions({group: option for group, option in named.items() if option in options[group]})


def hparams_record(config: dict[str, Any], metrics: list[str]) -> list[Summary]:
    """The hparams plugin's experiment (each key of ``config`` but Hydra's, with its type and description, and the
    final ``metrics``' tags) and its start record (the run's values), as torch's ``hparams`` writes them, but with the
    descriptions, and booleans as booleans (torch's writes them as the numbers 0 and 1)."""
    descriptions = described(config)
    start, infos = SessionStartInfo(), []
    for key, value in flatten(config).items():
        if key.startswith("hydra"):
            continue
        if isinstance(value, bool):
            start.hparams[key].bool_value, kind = value, "DATA_TYPE_BOOL"
        elif isinstance(value, (int, float)):
            start.hparams[key].number_value, kind = value, "DATA_TYPE_FLOAT64"
        else:
            start.hparams[key].string_value, kind = value, "DATA_TYPE_STRING"
        infos.append(HParamInfo(name=key, type=DataType.Value(kind), description=descriptions.get(key, "")))
    experiment = Experiment(hparam_infos=infos, metric_infos=[MetricInfo(name=MetricName(tag=tag)) for tag in metrics])
    return [plugin_summary(metadata.EXPERIMENT_TAG, HParamsPluginData(experiment=experiment)),
            plugin_summary(metadata.SESSION_START_INFO_TAG, HParamsPluginData(session_start_info=start))]


def plugin_summary(tag: str, data: HParamsPluginData) -> Summary:
    data.version = metadata.PLUGIN_DATA_VERSION
    plugin = SummaryMetadata.PluginData(plugin_name=metadata.PLUGIN_NAME, content=data.SerializeToString())
    return Summary(value=[Summary.Value(tag=tag, metadata=SummaryMetadata(plugin_data=plugin))])


class RunLogger:
    """``final_tags`` maps the TensorBoard tags of the final numbers (shown in the HParams tab, whose
    values are the scalars logged under the same tags) to their keys in metrics.json."""

    def __init__(self, run_dir: Path, config: dict[str, Any], final_tags: dict[str, str],
                 purge_step: int | None = None):
        self.run_dir = Path(run_dir)
        self.final_tags = final_tags
        # purge_step drops events a crashed run wrote after its last checkpoint, so a resumed run's
        # curves have no duplicate steps.
        with self.writing_events():
            self.writer = SummaryWriter(log_dir=str(self.run_dir), purge_step=purge_step)
            for summary in hparams_record(config, list(final_tags)):  # its end: end_session
                self.writer.file_writer.add_summary(summary)

    @contextmanager
    def writing_events(self) -> Iterator[None]:
        """TensorBoard's writes, a failed one a WriteError (its writer thread's OSError comes back wrapped, or at a
        later call)."""
        try:
            yield
        except Exception as err:
            cause = os_error_in(err)
            if cause is None:
                raise
            raise write_error(Path(cause.filename or self.run_dir), cause,
                              kept="; the run's checkpoints are intact") from err

    def scalars(self, values: dict[str, float], step: int) -> None:
        with self.writing_events():
            for tag, value in values.items():
                self.writer.add_scalar(tag, value, step)

    def epoch(self, record: dict[str, Any]) -> None:
        append_line(self.run_dir / "metrics.jsonl", json.dumps(record))

    def final(self, metrics: dict[str, Any], step: int) -> None:
        """The final numbers: TensorBoard's test/* scalars at ``step`` (best/* are logged by every epoch already),
        the hparams record's successful end, and metrics.json."""
        self.scalars({tag: metrics[key] for tag, key in self.final_tags.items()
                      if metrics.get(key) is not None and not tag.startswith("best/")}, step)
        self.end_session("STATUS_SUCCESS")
        write_atomically(self.run_dir / "metrics.json", json.dumps(metrics, indent=2) + "\n")

    def status(self, status: str, record: dict[str, Any], failed: bool = False) -> None:
        """metrics.json of a run without its result: ``{"status": status, **record}``; a failed run's hparams record
        ends with FAILURE."""
        if failed:
            self.end_session("STATUS_FAILURE")
        write_atomically(self.run_dir / "metrics.json", json.dumps({"status": status, **record}, indent=2) + "\n")

    def end_session(self, status: str) -> None:
        end = HParamsPluginData(session_end_info=SessionEndInfo(status=Status.Value(status)))
        with self.writing_events():
            self.writer.file_writer.add_summary(plugin_summary(metadata.SESSION_END_INFO_TAG, end))
            self.writer.flush()

    def close(self) -> None:
        with self.writing_events():
            self.writer.close()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file, each a JSON object; a last line cut short by a crash mid-write (of a file
    from before vdrnn replaced it whole) is skipped, and any other damage is a RecordError naming the line."""
    try:
        lines = [line for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as err:
        raise RecordError(f"{path} cannot be read as text ({err}); restore it, or move it aside (the run's "
                          f"per-epoch history then starts over)") from None
    records = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if number < len(lines):  # only the last line can be a torn write; anything else is damage
                raise RecordError(f"{path}, line {number}, is not JSON ({line[:60]!r}): it was damaged; restore the "
                                  f"file, or delete that line, then run the same command again") from None
            log.warning("%s: skipping its last line, cut short (%r)", path, line[:80])
            continue
        if not isinstance(record, dict):
            raise RecordError(f"{path}, line {number}, is no epoch's record ({line[:60]!r}): it was damaged; restore "
                              f"the file, or delete that line, then run the same command again")
        records.append(record)
    return records
