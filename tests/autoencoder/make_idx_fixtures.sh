#!/bin/sh
# Writes idx image files that hold no usable Fashion-MNIST: DIR/zero (no images of 28x28) and
# DIR/tiny (one 1x1 image), as plain files (the readers take gzip or plain).
set -eu
mkdir -p "$1/zero" "$1/tiny"
# The magic 0x00000803 (unsigned bytes, 3 dimensions), then images, rows, columns, big-endian.
printf '\000\000\010\003\000\000\000\000\000\000\000\034\000\000\000\034' \
  >"$1/zero/train-images-idx3-ubyte.gz"
printf '\000\000\010\003\000\000\000\001\000\000\000\001\000\000\000\001\177' \
  >"$1/tiny/train-images-idx3-ubyte.gz"
