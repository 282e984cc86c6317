"""Writes of sources: the sources themselves (`sources`), their runs (`runs`) and each item a run
takes or lets go (`items`)."""
