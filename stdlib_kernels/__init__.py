"""trnlang package."""
