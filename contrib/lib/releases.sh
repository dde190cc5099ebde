# Sourced by contrib/test.sh (tier 5) and test/host/run.sh.
#
# release_sources DEPS EXPLICIT VERSION...
#   Splits the releases into those whose source tarball DEPS/ucx-V.tar.gz is
#   there (RELEASES_PRESENT) and those whose is not (RELEASES_MISSING). A
#   clone without ../shared/deps has none: its tier 5 says which are missing
#   and skips them. EXPLICIT=1 (the user named the releases) keeps them all
#   in RELEASES_PRESENT, so that a missing one fails where it is built.
release_sources() {
    local deps=$1 explicit=$2 v
    shift 2
    RELEASES_PRESENT=""
    RELEASES_MISSING=""
    for v in "$@"; do
        if [ "$explicit" = 1 ] || [ -f "$deps/ucx-$v.tar.gz" ]; then
            RELEASES_PRESENT="${RELEASES_PRESENT:+$RELEASES_PRESENT }$v"
        else
            RELEASES_MISSING="${RELEASES_MISSING:+$RELEASES_MISSING }$v"
        fi
    done
}
