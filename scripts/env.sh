# Where zoo's setup keeps what it installs outside the source tree; sourced by the scripts.
#   ZOO_DATA_DIR   the cache (default: $XDG_CACHE_HOME/zoo, else ~/.cache/zoo): the default
#                  corpus, the Python environment, the tests' reference files, the compiler cache
#   ZOO_VENV       the Python environment (default: $ZOO_DATA_DIR/venv): torch (LibTorch), the
#                  Hugging Face references; reused while scripts/requirements.txt is unchanged
zoo_cache="${ZOO_DATA_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/zoo}"
zoo_venv="${ZOO_VENV:-$zoo_cache/venv}"
zoo_python="$zoo_venv/bin/python"
