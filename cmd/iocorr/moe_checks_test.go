package main

import "github.com/iocorr/iocorr/testkit/spooltest"

// The end-to-end tests still in this package (the recorder's, moving
// beside it) read runs with spooltest's readers.
var spoolEvents = spooltest.Events
