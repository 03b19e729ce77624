# Sourced first by the benchmark scripts, whose opening comment is their usage: usage prints it;
# usage_from_header "$@" prints it and exits 0 when the script is asked for --help or -h, before
# it runs anything.
usage() { sed -n '2,/^[^#]/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
usage_from_header() {
  if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
    usage
    exit 0
  fi
}
