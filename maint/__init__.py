"""hermes-maint: maintenance for Hermes Agent session stores."""

__version__ = "0.1.0"
PROG = "hermes-maint"
