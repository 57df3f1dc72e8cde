from raftlog import compiled as _compiled

_compiled.install()
