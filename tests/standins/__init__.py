"""Stand-ins for real databases, for tests of what a real one rarely does:
answer wrongly, lose writes, reorder or drop events. Each serves the real
wire protocol on loopback, so the engine under test cannot tell it apart."""
