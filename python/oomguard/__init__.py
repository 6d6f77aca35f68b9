"""oomguard from Python: where the wheel installed the `oomguard` binary.

The wheel's real content is the Rust binary, which pip puts in the environment's scripts
directory (the venv's bin/, ~/.local/bin for `pip install --user`), already on PATH. This
package only finds it again, for `python -m oomguard` (see __main__.py) and for code that wants
to run it: `subprocess.run([oomguard.find_oomguard_bin(), "classify", "train.log"])`.
"""

import os
import sysconfig

__all__ = ["find_oomguard_bin"]


def find_oomguard_bin() -> str:
    """The path of the `oomguard` binary installed beside this package.

    Looks where each way of installing a wheel puts scripts: the environment's own scheme (a
    venv, conda, the system), the user scheme (`pip install --user`), the prefix this package
    sits under (`pip install --prefix DIR`: DIR/lib/pythonX.Y/site-packages/oomguard next to
    DIR/bin) and a `--target DIR` install (DIR/oomguard next to DIR/bin). Raises
    FileNotFoundError naming every place it looked.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    places = [sysconfig.get_path("scripts")]
    user_scheme = "osx_framework_user" if sysconfig.get_config_var("PYTHONFRAMEWORK") else "posix_user"
    if user_scheme in sysconfig.get_scheme_names():
        places.append(sysconfig.get_path("scripts", scheme=user_scheme))
    places.append(os.path.join(here, os.pardir, os.pardir, os.pardir, os.pardir, "bin"))
    places.append(os.path.join(here, os.pardir, "bin"))
    for place in places:
        path = os.path.normpath(os.path.join(place, "oomguard"))
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(
        "the oomguard binary is not installed beside this package; looked in "
        + ", ".join(os.path.normpath(p) for p in places)
    )
