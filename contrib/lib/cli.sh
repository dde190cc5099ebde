# shellcheck shell=bash
# Sourced by the benchmark and site scripts (contrib/bench-*.sh,
# contrib/site/validate-site.sh): the helpers of their command lines.
#
# Set before sourcing (or before the first call):
#   CLI_NAME         the prefix of every message ("bench-rc")
#   CLI_DIE_STATUS   exit status of die (1); bad_usage always exits 2
# The script defines usage(), which bad_usage prints on stderr.
#
# die TEXT...        "NAME: TEXT" on stderr, exit CLI_DIE_STATUS
# bad_usage TEXT...  "NAME: TEXT" and the usage on stderr, exit 2
# is_number S        S is a positive decimal integer
# cli_need_number OPTION NARGS VALUE
#                    bad_usage "OPTION needs a number" unless OPTION has a
#                    value (NARGS: "$#" where OPTION is $1) that is a number

die() { echo "${CLI_NAME:-${0##*/}}: $*" >&2; exit "${CLI_DIE_STATUS:-1}"; }

bad_usage() {
    echo "${CLI_NAME:-${0##*/}}: $*" >&2
    usage >&2
    exit 2
}

is_number() { [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -gt 0 ]; }

cli_need_number() {
    if [ "$2" -lt 2 ] || ! is_number "$3"; then
        bad_usage "$1 needs a number"
    fi
}
