package main

import (
	"errors"
	"fmt"

	"github.com/tidemark/tidemark/cache"
)

// evictionFlag names the flag that overrides a refused eviction policy.
func evictionFlag(err error) error {
	if errors.Is(err, cache.ErrEvictionPolicy) {
		return fmt.Errorf("%w (--allow-allkeys-eviction)", err)
	}
	return err
}
