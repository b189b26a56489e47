"""No dropout: every mask is one, in training and in evaluation (Table 1's "non-regularized" row, kept by early
stopping: the best-validation checkpoint is tested)."""

from vdrnn.dropout.registry import register
from vdrnn.dropout.scheme import DropoutScheme


@register
class NoDropout(DropoutScheme):
    name = "none"
    table_order = 0
