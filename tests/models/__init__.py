"""Scripted model servers on 127.0.0.1 that real agent CLIs talk to in the `cli` tests."""
