"""Review sentiment with any dropout scheme and cell: IMDB classification and the Pang & Lee scale regression.

    config.py     the run config (data.* of a review dataset, the classifier's model)
    datasets/     one module per dataset: finds, reads and checks its files (imdb.py, scale.py)
    text.py       tokenizer, vocabulary, padding and chunking
    data.py       a dataset as tensors: the splits, the vocabulary, the target scale
    model.py      embedding -> recurrent layers -> dropout -> linear, read at each review's last step
    train.py      minibatches of whole reviews, the best-validation (or last) epoch kept
    predict.py    predictions with weight scaling and with MC dropout
    evaluate.py   the test: metrics, temperature, the uncertainty's parts, selective prediction
    ood.py        out-of-domain detection: the test reviews against other text cut to their lengths
    metrics.py    accuracy, NLL, calibration (ECE and its floor), RMSE
"""

from __future__ import annotations

from vdrnn.tasks.base import Task


class Sentiment(Task):
    name = "sentiment"
    title = "sentiment models"
    first_run_settings = "data.limit=500 data.max_length=100 trainer.epochs=1"  # about a minute on 2 CPU cores
    smoke_keys = ("data.limit",)
    # A sentiment model scores every review on its own, so how many reviews an evaluation pass holds changes no
    # weight-scaling number beyond float rounding (MC draws its masks in another order: another draw). A language
    # model's evaluation batch does change its numbers: it cuts the text into other streams.
    report_ignores = ("data.eval_batch_size",)

    def parse(self, raw):
        from vdrnn.tasks.sentiment.config import from_dict

        cfg = from_dict(raw)
        self.check_dataset(cfg.data)
        return cfg

    def ood_texts(self, data):
        from vdrnn.tasks.lm.datasets import OOD_TEXTS

        return OOD_TEXTS  # a classifier's; a regression is refused once its data says what it is

    def headline(self, metrics):
        if "test_rmse" in metrics:
            mc = f", MC {metrics['test_rmse_mc']:.4f}" if "test_rmse_mc" in metrics else ""
            return f"test RMSE {metrics['test_rmse']:.4f}{mc}"
        mc = (f", MC {100 * metrics['test_accuracy_mc']:.2f}% (ECE {metrics['test_ece']:.4f}, MC "
              f"{metrics['test_ece_mc']:.4f})" if "test_accuracy_mc" in metrics else f" (ECE {metrics['test_ece']:.4f})")
        return f"test accuracy {100 * metrics['test_accuracy']:.2f}%{mc}"

    def trainer(self):
        from vdrnn.tasks.sentiment.train import SentimentTrainer

        return SentimentTrainer

    def load_data(self, cfg):
        from vdrnn.tasks.sentiment.data import load_data

        return load_data(cfg, self.reader(cfg.data))

    def build_model(self, cfg, data, device):
        from vdrnn.tasks.sentiment.model import SentimentModel

        return SentimentModel(len(data.vocab), data.num_outputs, cfg.model, cfg.dropout).to(device)

    def evaluate_model(self, model, data, cfg):
        from vdrnn.tasks.sentiment.evaluate import evaluate_all

        return evaluate_all(model, data, cfg)


TASK = Sentiment()
