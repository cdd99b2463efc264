"""Market data: file readers and sources, wire messages, transport and validation."""
