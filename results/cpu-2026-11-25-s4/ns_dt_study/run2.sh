#!/bin/bash
g=/work/main/build/apps/fno_datagen
run() {  # nu T dt precision tag
  $g --problem ns --resolution 256 --subsample 4 --samples 2 --seed 0 --viscosity $1 --dt $3 --t-final $2 --precision $4 --device cpu --batch 2 --out nu$1_dt$3$5.h5 --progress none > nu$1_dt$3$5.log 2>&1
}
run 1e-3 50 1e-3 float64 _f64
run 1e-5 20 1e-3 float32
run 1e-5 20 5e-4 float32
run 1e-5 20 1e-4 float32
run 1e-3 50 1e-4 float64 _f64
echo done > DONE2
