// Package scenario holds end-to-end tests of the agent's side (client SDK,
// Elector, leasectl) against the real leasesvc binary: two electors, a
// leader cut off from the service by a TCP proxy the test controls,
// `leasectl run` stopping its child before anyone else can lead, and five
// agents sharing a thousand tasks through a sink fenced with signed proofs
// (forged higher tokens refused) while their leader is killed twice. It
// has no code outside its tests.
package scenario
