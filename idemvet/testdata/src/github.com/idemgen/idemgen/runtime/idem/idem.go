// Package idem is a stub of idemgen's runtime with what scaffolds use.
package idem

import "errors"

var ErrNotImplemented = errors.New("phase not implemented")
