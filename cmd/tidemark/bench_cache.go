package main

import "errors"

// benchCacheCmd is replaced by the issue that builds it.
type benchCacheCmd struct{}

func (benchCacheCmd) Run() error { return errors.New("tidemark bench cache: not built yet") }
