"""The C side of an artifact: the ABI spec, C expressions, NAME.h / dispatcher / link, the runtime sources."""
