#!/usr/bin/env bash
# The layout's rules, read from the sources (no build needed):
#   - includes point down only: apps -> train -> engine -> {libfno, offload},
#     data beside the engine (over libfno); offload knows nothing of the FNO;
#   - a policy is compared by kind, never by its text, outside its parser
#     (offload/src/planner.cpp's parse_policy);
#   - no file in train/ or engine/ over about 600 lines (650 at most);
#   - every experiment override (libfno/src/overrides.cpp) is documented in
#     docs/development.md's table, and the table names no other;
#   - no library reads an FNO_* variable but through that list.
#   test_layering.sh SOURCE_DIR
set -uo pipefail
root=${1:?usage: test_layering.sh SOURCE_DIR}
cd "$root" || exit 2
fail=0
# folder : the include prefixes it may use (besides its own)
allowed() {
  case $1 in
    libfno) echo "fno" ;;
    offload) echo "fno_offload" ;;
    data) echo "fno_data fno" ;;
    engine) echo "fno_engine fno fno_offload" ;;
    train) echo "fno_train fno_engine fno_data fno fno_offload" ;;
  esac
}
for dir in libfno offload data engine train; do
  ok=" $(allowed $dir) "
  while IFS= read -r hit; do
    file=${hit%%:*}
    prefix=$(sed -E 's/.*#include <(fno[a-z_]*)\/.*/\1/' <<<"$hit")
    if [[ $ok != *" $prefix "* ]]; then
      echo "upward or sideways include: $file includes <$prefix/...> ($dir may include: $ok)"
      fail=1
    fi
  done < <(grep -rnE '#include <fno[a-z_]*/' "$dir" --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh')
done
# A policy's text is for messages: compared, it would be parsed twice.
while IFS= read -r hit; do
  echo "policy compared by its text: $hit"
  fail=1
done < <(grep -rnE '(policy|offload_policy)(\.text)? *[!=]= *"|parse_policy\("[a-z+:0-9]*"\)' \
           libfno offload data engine train --include='*.h' --include='*.cpp' |
         grep -v '^offload/src/planner.cpp:')
for f in $(find train engine -name '*.cpp' -o -name '*.h'); do
  n=$(wc -l <"$f")
  if [ "$n" -gt 650 ]; then
    echo "$f: $n lines (the rule: about 600, 650 at most)"
    fail=1
  fi
done
listed=$(grep -oE '\{"FNO_[A-Z0-9_]+"' libfno/src/overrides.cpp | tr -d '{"' | sort -u)
documented=$(sed -n '/^## Experiment overrides/,/^## /p' docs/development.md |
             grep -oE '^\| `FNO_[A-Z0-9_]+' | tr -d '|` ' | sort -u)
if [ "$listed" != "$documented" ]; then
  echo "experiment overrides: the list and docs/development.md differ:"
  diff <(echo "$listed") <(echo "$documented")
  fail=1
fi
while IFS= read -r hit; do
  echo "an FNO_* variable read outside fno/overrides.h: $hit"
  fail=1
done < <(grep -rnE 'getenv\("FNO_' libfno offload data engine train --include='*.h' --include='*.cpp' --include='*.cu')
[ $fail -eq 0 ] && echo "layering: ok"
exit $fail
