#!/usr/bin/python3
"""The conventions cloud users already have (issue 15), against a real S3-compatible server
(s3rver): with no s3_* keys in the spec, the endpoint comes from AWS_ENDPOINT_URL_S3 (or
AWS_ENDPOINT_URL), the region from AWS_REGION / AWS_DEFAULT_REGION, and the credentials from
AWS_PROFILE's section of the shared credentials file; the spec's keys still win over them.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

failures, expect = testlib.checks()
KEY = testlib.S3_KEY


def main():
    args = testlib.arg_parser().parse_args()
    if not testlib.s3rver_path():
        print("SKIP: s3rver missing: run `npm ci` in tests/data")
        return testlib.SKIP
    procs = []
    with testlib.workdir("zt_aws_", procs) as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 8000, 3)
        proc, port = testlib.start_s3rver(os.path.join(work, "s3"), "zt")
        procs.append(proc)
        for f in os.listdir(data):
            p = testlib.run(["curl", "-s", "-f", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", f"{KEY}:{KEY}",
                             "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-T", os.path.join(data, f),
                             f"http://127.0.0.1:{port}/zt/data/{f}"], check=False)
            expect(p.returncode == 0, f"upload {f}: {p.stderr}")
        creds = os.path.join(work, "credentials")
        with open(creds, "w") as f:
            f.write(f"[default]\naws_access_key_id = WRONG\naws_secret_access_key = WRONG\n\n"
                    f"[training]\naws_access_key_id = {KEY}\naws_secret_access_key = {KEY}\n")
        spec = testlib.tiny_spec(os.path.join(work, "spec.toml"), os.path.join(work, "run"),
                                 {"train": "s3://zt/data", "s3_path_style": True,
                                  "cache_dir": os.path.join(work, "cache")},
                                 model={"n_layer": 1, "n_head": 2, "d_model": 16, "vocab_size": 257, "seq_len": 16},
                                 train={"micro_batch": 2, "global_batch": 2, "max_steps": 2})
        clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env = dict(clean, AWS_ENDPOINT_URL_S3=f"http://127.0.0.1:{port}", AWS_REGION="us-east-1",
                   AWS_SHARED_CREDENTIALS_FILE=creds, AWS_PROFILE="training")
        p = testlib.run([args.ztrain, "train", spec], check=False, env=env)
        expect(p.returncode == 0, f"endpoint, region and profile from the environment: exit {p.returncode}: {p.stderr[-500:]}")
        p = testlib.run([args.ztrain, "train", spec, "--set", "run.out_dir=" + os.path.join(work, "run2")], check=False,
                        env=dict(env, AWS_ENDPOINT_URL_S3="", AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}"))
        expect(p.returncode == 0, f"AWS_ENDPOINT_URL: exit {p.returncode}: {p.stderr[-300:]}")
        # the default profile holds wrong keys: s3rver refuses them
        p = testlib.run([args.ztrain, "train", spec], check=False, env=dict(env, AWS_PROFILE="default"))
        expect(p.returncode == 2 and "403" in p.stderr, f"wrong profile: exit {p.returncode}: {p.stderr[-300:]}")
        # the spec's keys win over the environment's endpoint
        p = testlib.run([args.ztrain, "train", spec, "--set", "data.s3_endpoint=http://127.0.0.1:9",
                         "--set", "data.retries=0", "--set", "data.timeout_s=1"], check=False, env=env)
        expect(p.returncode != 0 and "Couldn't connect" in p.stderr,
               f"the spec's endpoint did not win: exit {p.returncode}: {p.stderr[-300:]}")
        print("AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, AWS_REGION and AWS_PROFILE's credentials work; the spec wins")
    return testlib.report(failures, "the AWS CLI's environment conventions work against s3rver")


if __name__ == "__main__":
    sys.exit(main())
