"""Word-level language modelling: Gal & Ghahramani's Table 1 on Penn Treebank, and AWD-LSTM.

    config.py    the run config (data.* of a corpus, BPTT, batch sizes)
    datasets/    one module per corpus: finds and reads its files (ptb.py, wikitext2.py)
    data.py      a corpus as token streams, cut into parallel columns and BPTT minibatches
    model.py     embedding -> stacked LSTM layers -> decoder, with the dropout scheme's sites
    train.py     truncated BPTT with SGD (Zaremba, Gal), AWD's variable lengths, AR/TAR and NT-ASGD
    evaluate.py  perplexity with weight scaling and with MC dropout, calibration, the uncertainty's parts
    ood.py       out-of-domain detection: the test's sentences against another corpus's
"""

from __future__ import annotations

from vdrnn.tasks.base import Task


class LanguageModelling(Task):
    name = "lm"
    title = "language models"
    takes_init_from = True  # AWD's fine-tuning starts from the trained weights
    eval_keys = ("data.test_batch_size", "data.eval_max_tokens")
    # About a minute on 2 CPU cores; on PTB, the README's first run.
    first_run_settings = "model=small trainer.epochs=1 trainer.max_steps=150 data.eval_max_tokens=10000"
    default_dataset = "ptb"
    smoke_keys = ("data.eval_max_tokens",)

    def parse(self, raw):
        from vdrnn.tasks.lm.config import from_dict

        cfg = from_dict(raw)
        self.check_dataset(cfg.data)
        return cfg

    def ood_texts(self, data):
        from vdrnn.tasks.lm.datasets import OOD_TEXTS

        return tuple(name for name in OOD_TEXTS if name != data.name)  # its own corpus is in-domain

    def headline(self, metrics):
        mc = f", MC {metrics['test_ppl_mc']:.2f}" if metrics.get("test_ppl_mc") is not None else ""
        return f"test ppl {metrics['test_ppl']:.2f}{mc} (valid {metrics['valid_ppl']:.2f})"

    def trainer(self):
        from vdrnn.tasks.lm.train import LanguageModelTrainer

        return LanguageModelTrainer

    def load_data(self, cfg):
        from vdrnn.tasks.lm.data import load_streams

        return load_streams(cfg, self.reader(cfg.data))

    def build_model(self, cfg, data, device):
        from vdrnn.tasks.lm.model import LanguageModel

        return LanguageModel(len(data.vocab), cfg.model, cfg.dropout).to(device)

    def evaluate_model(self, model, data, cfg):
        from vdrnn.tasks.lm.evaluate import evaluate_all

        return evaluate_all(model, data, cfg)


TASK = LanguageModelling()
