"""vdrnn: dropout in recurrent networks, reproduced (Gal & Ghahramani 2016 and the schemes it is compared with)."""

__version__ = "0.1.0"
