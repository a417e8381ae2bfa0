"""Print pip constraints pinning each dependency in setup.cfg's install_requires to the lowest
version it allows (its ``>=`` bound), so CI can check that those bounds are true."""

import configparser
from pathlib import Path

from packaging.requirements import Requirement

cfg = configparser.ConfigParser()
cfg.read(Path(__file__).parent.parent / "setup.cfg")
for line in cfg["options"]["install_requires"].split():
    req = Requirement(line)
    bounds = [s.version for s in req.specifier if s.operator == ">="]
    if bounds:
        print(f"{req.name}=={bounds[0]}")
