#!/bin/bash
#
# Include and call circles among the C files of src/ (or of the tree given):
# reports each one with its files and functions, exits 1 on any.
# The rules and the allowed exceptions: contrib/check-circles.py.
#
# Usage: contrib/check-circles.sh [--verbose] [ROOT]
#
exec python3 "$(dirname "$0")/check-circles.py" "$@"
