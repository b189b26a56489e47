"""One module per dropout scheme family; each registers its scheme (``@register``) when `vdrnn.dropout` imports it."""
