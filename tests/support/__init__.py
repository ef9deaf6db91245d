"""What the tests and the benchmarks share: servers, corpora, reference code, requests."""
