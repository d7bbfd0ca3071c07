package client

import "io"

// SwapModeOut makes w the writer of the mode lines of Electors without a
// Logger, with no mode said yet, until restore.
func SwapModeOut(w io.Writer) (restore func()) {
	modeSaid.Lock()
	old, oldMode := modeOut, modeSaid.mode
	modeOut, modeSaid.mode = w, ""
	modeSaid.Unlock()
	return func() {
		modeSaid.Lock()
		modeOut, modeSaid.mode = old, oldMode
		modeSaid.Unlock()
	}
}
