"""Small, real examples shipped with the package; ``digits`` is what a bare ``surge fit`` trains."""
