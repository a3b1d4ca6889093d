# Packaging checks (issue 7): Dockerfile, compose stack, Helm chart, offline.
# The main branch's Makefile runs this target from `make test`.
.PHONY: packaging-check

packaging-check:
	bash scripts/check-packaging.sh
