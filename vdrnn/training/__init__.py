"""What every task's training and evaluation share: the device, the optimizer's step, checkpoints and resume, the
epoch loop, and what a run writes. A task's trainer (``vdrnn/tasks/<task>/train.py``) subclasses
:class:`~vdrnn.training.trainer.EpochTrainer` and supplies its epochs, validation and test."""
