# Thin wrapper: everything lives in ./chime so a machine without make works the same.
.PHONY: run test lint bench
run:
	./chime run
test:
	./chime test
lint:
	./chime lint
bench:
	./bench/run
