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


def test_a_run_resumed_in_its_own_folder_keeps_its_hparams_beside_its_end_in_its_new_event_file(tmp_path):
    """A run stopped by a signal and started again writes a second event file, which its end goes to: the hparams
    record goes there too, so that the file holding the end holds what it ended."""
    RunLogger(tmp_path, CONFIG, FINAL_TAGS).close()  # stopped: no end
    first = set(tmp_path.glob("events.out.tfevents.*"))
    resumed = RunLogger(tmp_path, CONFIG, FINAL_TAGS, purge_step=1)
    resumed.end_session("STATUS_SUCCESS")
    resumed.close()
    (second,) = set(tmp_path.glob("events.out.tfevents.*")) - first
    assert hparams_of(second)["dropout.scheme"] == "variational"
    assert set(events_of(second).PluginTagToContent("hparams")) == {
        "_hparams_/experiment", "_hparams_/session_start_info", "_hparams_/session_end_info"}


def test_hparams_are_described_by_conf_s_comments_and_booleans_stay_booleans(tmp_path):
    from tensorboard.plugins.hparams import api_pb2

    from tests.helpers import composed
    from vdrnn.config import to_container

    RunLogger(tmp_path, to_container(composed("dataset=imdb")), FINAL_TAGS).close()
    (event_file,) = tmp_path.glob("events.out.tfevents.*")
    content = events_of(event_file).PluginTagToContent("hparams")["_hparams_/experiment"]
    infos = {info.name: info for info in plugin_data_pb2.HParamsPluginData.FromString(content).experiment.hparam_infos}
    assert infos["dropout.recurrent"].description == "h_{t-1} (Gal)"
    assert infos["data.max_length"].description.startswith("tokens kept")  # the dataset's own file's comment
    assert infos["eval.samples"].description and infos["cell.gates"].description
    assert not [name for name, info in infos.items() if not info.description]
    assert infos["trainer.stop_nonmono"].type == api_pb2.DataType.Value("DATA_TYPE_BOOL")
    assert hparams_of(event_file)["trainer.stop_nonmono"] is False
