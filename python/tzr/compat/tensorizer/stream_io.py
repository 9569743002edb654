"""tensorizer.stream_io is tzr.stream_io (the same module object)."""
import sys

import tzr.stream_io

sys.modules[__name__] = tzr.stream_io
