#!/usr/bin/env bash
# The style gate for shell (scripts/test.sh's style step): every shell script of the repository
# (*.sh, .ci/run, and any tracked file whose first line runs bash or sh)
#   1. passes Debian's shellcheck, with the repository's .shellcheckrc;
#   2. has no pipeline whose reader may stop before its writer is done: a pipe into head,
#      grep -q, grep -m, an awk that exits or a sed that quits. Under `pipefail` the writer dies of
#      SIGPIPE and the pipeline fails (141) only when the writer is slow or its output big: on a
#      cold cache, never on the warm machine that wrote the script. Read to the end instead:
#      `| sed -n 1p`, `| grep PATTERN >/dev/null`, awk that keeps the first match and prints it
#      in END.
# Prints each finding as FILE:LINE: and exits 1 if there is one.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v shellcheck >/dev/null || { echo "lint-shell: no shellcheck (scripts/setup.sh --for test installs it)" >&2; exit 1; }
files=()
while IFS= read -r -d '' f; do
  [[ -f $f ]] || continue
  case $f in
    *.sh | .ci/run) files+=("$f") ;;
    *) first= && IFS= read -r first <"$f" 2>/dev/null || true
       [[ $first =~ ^\#!.*[/\ ](ba)?sh([[:space:]]|$) ]] && files+=("$f") ;;
  esac
done < <(git ls-files -z)
rc=0
shellcheck -f gcc "${files[@]}" || rc=1
early='\|[[:space:]]*(head\b|grep[[:space:]]+(-[a-zA-Z]*[qm]|--max-count|--quiet)|awk\b[^|]*\bexit\b|sed\b[^|]*[;[:space:]'"'"']q\b)'
# Comment lines are prose (this header names the patterns): not findings.
if grep -nHE "$early" "${files[@]}" | grep -vE '^[^:]+:[0-9]+:[[:space:]]*#'; then
  echo "lint-shell: the lines above read a pipeline's output only in part (see this script's header)" >&2
  rc=1
fi
echo "lint-shell: ${#files[@]} scripts, $([[ $rc == 0 ]] && echo clean || echo 'findings above')" >&2
exit $rc
