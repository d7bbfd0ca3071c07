/**
 * The fence case of the conformance suite (sdk/conformance/PROTOCOL.md,
 * docs/contract.md §17): the service's proofs verify through its JWKS, and
 * a Guard refuses altered, re-signed, unknown-key, other-lease, stale and
 * bare-number proofs, each with its reason.
 */
import type { Client } from "../client.js";
import { FenceError, Guard, RemoteKeys, Verifier } from "../fence.js";

const b64 = (s: string): string => Buffer.from(s, "latin1").toString("base64url");
const unb64 = (s: string): string => Buffer.from(s, "base64url").toString("latin1");

/** fenceCase runs the case, writing its lines with emit. */
export async function fenceCase(c: Client, url: string, name: string, a: string, ttlMs: number, driver: string, emit: (line: Record<string, unknown>) => void): Promise<void> {
  const v = new Verifier(new RemoteKeys(url.replace(/\/$/, "") + "/.well-known/jwks.json"), "leasesvc");
  const g = new Guard(v);
  const l = await c.acquire(name, { holder: a, ttlMs });
  const mine = l.proof ?? "";
  for (const [step, proof] of [["verify", mine], ["verify_driver", driver]] as const) {
    const cl = await v.verify(proof);
    emit({ step, lease: cl.lease, holder: cl.holder, token: cl.fencingToken });
  }
  const [h = "", p = "", s = ""] = mine.split(".");
  const ds = driver.split(".")[2] ?? "";
  const tampered = [h, b64(unb64(p).replace('"fencingToken":1,', '"fencingToken":1000000,')), s].join(".");
  const hdr = unb64(h);
  const at = hdr.indexOf('"kid":"') + '"kid":"'.length;
  const unknown = [b64(hdr.slice(0, at) + (hdr[at] === "A" ? "B" : "A") + hdr.slice(at + 1)), p, s].join(".");
  const refused = async (step: string, f: () => Promise<unknown>): Promise<void> => {
    try {
      await f();
    } catch (err) {
      if (!(err instanceof FenceError)) throw err;
      emit({ step, error: err.reason, message: err.message });
      return;
    }
    emit({ step, error: "none" });
    throw new Error(`${step}: admitted`);
  };
  await refused("tampered", () => v.verify(tampered));
  await refused("wrong_signature", () => v.verify([h, p, ds].join(".")));
  await refused("unknown_kid", () => v.verify(unknown));
  emit({ step: "guard", token: (await g.check(name, mine)).fencingToken });
  await refused("other_lease", () => g.check(name, driver));
  await c.release(name, a, l.fencingToken);
  const next = await g.check(name, (await c.acquire(name, { holder: a + "-b", ttlMs })).proof);
  emit({ step: "next_holder", holder: next.holder, token: next.fencingToken });
  await refused("stale", () => g.check(name, mine));
  await refused("forged", () => g.check(name, "1000000"));
  await refused("missing", () => g.check(name, ""));
  emit({ step: "highest", token: g.highest(name) });
  emit({ step: "done" });
}
