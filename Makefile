# Packaging checks (issue 7). The main branch's Makefile runs this target from `make test`.
.PHONY: packaging-check

packaging-check:
	scripts/check-packaging.sh
