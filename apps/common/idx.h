// Readers for the idx files of (Fashion-)MNIST, gzip-compressed or not, shared by the apps.
#pragma once

#include <string>
#include <vector>

#include "hkfac/kfac/types.h"

namespace hkfac::apps {

// An idx3-ubyte image file: one row per image, pixels scaled to [0, 1]. Throws hkfac::Error
// naming the file when it cannot be read, is not an image file or is truncated.
kfac::Matrix read_idx_images(const std::string &path);
// An idx1-ubyte label file, one label per entry; the same errors.
std::vector<int> read_idx_labels(const std::string &path);

} // namespace hkfac::apps
