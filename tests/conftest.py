"""The test session compiles into its own gradient cache (a temporary ADCORE_CACHE_DIR,
inherited by the processes tests start), never the user's."""
import atexit
import os
import shutil
import tempfile

os.environ["ADCORE_CACHE_DIR"] = tempfile.mkdtemp(prefix="adcore-test-cache-")
atexit.register(shutil.rmtree, os.environ["ADCORE_CACHE_DIR"], True)
