"""Integration tests: commands, processes and real sockets on loopback."""
