"""Benchmarks run by ``make bench``; each module's ``run()`` returns a section."""
