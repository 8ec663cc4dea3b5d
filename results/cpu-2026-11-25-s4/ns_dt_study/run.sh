#!/bin/bash
set -e
g=/work/main/build/apps/fno_datagen
for spec in "1e-3 50" "1e-5 20" "1e-4 30"; do
  set -- $spec
  for dt in 1e-3 5e-4 1e-4; do
    nice -n 10 $g --problem ns --resolution 256 --subsample 4 --samples 2 --seed 0 --viscosity $1 --dt $dt --t-final $2 --precision float32 --device cpu --batch 2 --out nu$1_dt$dt.h5 --progress none > nu$1_dt$dt.log 2>&1
  done
done
echo done > DONE
