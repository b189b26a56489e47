"""vdrnn.help: the comments in conf/ read back as each key's description, and printed beside the composed config.

What `vdrnn train --help` prints through the real CLI is in test_cli.py; that every key of every option has a
description is in test_config.py.
"""

from vdrnn.help import annotate, key_comments


def test_key_comments_follow_nesting_packages_and_continued_lines():
    text = """# @package data
# a file's header describes no key
name: imdb   # the task
loader:
  size: 3    # how many,
             # continued below its key
  url: http://x/#y
tail: 1
             # a comment after a key without one continues nothing
"""
    assert key_comments(text, "data") == {"data.name": "the task", "data.loader.size": "how many, continued below its key"}
    assert key_comments("a: 1  # one\nb: 2  # two\n", "") == {"a": "one", "b": "two"}


def test_annotate_puts_each_description_beside_its_key_and_a_long_value_s_below_it():
    config = "seed: 1\ndata:\n  root: " + "/x" * 30 + "\n  name: ptb\npaper:\n  row: Gal\n"
    described = {"seed": "the seed", "data.root": "a folder " * 20, "data.name": "the task", "paper": "a row"}
    lines = annotate(config, described).splitlines()
    assert lines[0] == "seed: 1      # the seed"  # column: 2 past the longest short line, "  name: ptb"
    assert lines[1] == "data:"
    assert lines[2] == "  root: " + "/x" * 30 and lines[3].startswith(" " * 13 + "# a folder a folder")
    assert all(len(line) <= 118 for line in lines) and len(lines) > 5  # wrapped, and continued at the column
    assert lines[-3:] == ["  name: ptb  # the task", "paper:       # a row", "  row: Gal"]


def test_eval_help_shows_only_the_keys_vdrnn_eval_takes():
    """Everything else comes from the checkpoint (and given, would be refused): eval's help lists what it takes."""
    from vdrnn.config import key_among
    from vdrnn.eval_settings import EVAL_ALWAYS, EVAL_WHEN_GIVEN, task_eval_keys
    from vdrnn.help import config_help

    text = config_help("eval", [])
    config = text.split("== Config ==\n")[1].split("\n\n")[0]
    keys, path = [], []
    for line in config.splitlines()[1:]:  # after "# composed from eval=scale"
        if not line.lstrip().startswith("#"):
            indent = len(line) - len(line.lstrip())
            path = path[: indent // 2] + [line.split(":")[0].strip()]
            keys.append(".".join(path))
    leaves = [key for key in keys if not any(other.startswith(key + ".") for other in keys)]
    assert all(key_among(key, (*EVAL_ALWAYS, *EVAL_WHEN_GIVEN, *task_eval_keys())) for key in leaves)
    assert {"checkpoint", "data.eval_max_tokens", "eval.samples", "trainer.amp", "model.impl"} <= set(leaves)
    assert "== Configuration groups ==\neval: mc, scale\n\n" in text
