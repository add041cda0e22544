package main

import "errors"

// inspectCmd is replaced by the issue that builds it.
type inspectCmd struct{}

func (inspectCmd) Run() error { return errors.New("tidemark inspect: not built yet") }
