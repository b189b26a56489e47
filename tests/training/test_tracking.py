"""The TensorBoard hparams table of a run: what goes in, and that a resumed run does not write it twice."""

from tensorboard.plugins.hparams import plugin_data_pb2

from tests.helpers import events_of
from vdrnn.training.tracking import RunLogger

CONFIG = {"seed": 1, "dropout": {"scheme": "variational", "recurrent": 0.5}, "model": {"hidden_size": None},
          "trainer": {"amp": "off", "graph": True}, "hydra": {"job": {"name": "train"}}}
FINAL_TAGS = {"test/ppl": "test_ppl"}


def hparams_of(event_file) -> dict[str, object] | None:
    """The hparams values an event file holds ({name: value}), or None if it holds no hparams table."""
    try:
        content = events_of(event_file).PluginTagToContent("hparams")
    except KeyError:  # no event of the hparams plugin in this file
        return None
    data = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    return {name: getattr(value, value.WhichOneof("kind")) for name, value in data.session_start_info.hparams.items()}


def test_hparams_hold_the_flattened_config_without_hydra_and_none_as_null(tmp_path):
    RunLogger(tmp_path, CONFIG, FINAL_TAGS).close()
    (event_file,) = tmp_path.glob("events.out.tfevents.*")
    assert hparams_of(event_file) == {"seed": 1, "dropout.scheme": "variational", "dropout.recurrent": 0.5,
                                      "model.hidden_size": "null", "trainer.amp": "off", "trainer.graph": True}


def test_a_run_resumed_in_its_own_folder_does_not_write_the_hparams_again(tmp_path):
    RunLogger(tmp_path, CONFIG, FINAL_TAGS).close()
    first = set(tmp_path.glob("events.out.tfevents.*"))
    RunLogger(tmp_path, CONFIG, FINAL_TAGS, purge_step=1).close()
    (second,) = set(tmp_path.glob("events.out.tfevents.*")) - first
    assert hparams_of(second) is None
    # One resumed into a new folder (resume=<another run's last.pt>) has none yet, so it writes them.
    RunLogger(tmp_path / "elsewhere", CONFIG, FINAL_TAGS, purge_step=1).close()
    (moved,) = (tmp_path / "elsewhere").glob("events.out.tfevents.*")
    assert hparams_of(moved)["dropout.scheme"] == "variational"
