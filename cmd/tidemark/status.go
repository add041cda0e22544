package main

import "errors"

// statusCmd is replaced by the issue that builds it.
type statusCmd struct{}

func (statusCmd) Run() error { return errors.New("tidemark status: not built yet") }
