"""`python3 -m tzr.compat`: print the folder to put first on PYTHONPATH."""
from . import PATH

print(PATH)
