"""The pipelined probe of protocol 4 designs (docs/design.md, "The designs measured"): Redis
user and total CPU per acquire+release pair, 10,000 keys, batches of 64, 300 batches, 5 runs, medians,
against the bare lock in the same run. Needs redis-py and redis_harness.py beside it:
    /tmp/venv/bin/python docs/results/protocol4_probe.py
"""
import random, statistics, uuid, sys
from redis_harness import CAD, redis_server, KEYS, BATCH
ROUNDS=300
REL_SLOT = """local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then redis.call('DEL', KEYS[1]); redis.call('HSET', KEYS[1] .. ':f', ARGV[2] % 32, ARGV[2]); return 1 end
return 0"""
REL_SLOT_EXP = """local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then redis.call('DEL', KEYS[1]); local r = KEYS[1] .. ':f'; redis.call('HSET', r, ARGV[2] % 32, ARGV[2]); redis.call('PEXPIRE', r, 60000); return 1 end
return 0"""
with redis_server() as (r, cpu):
    def ucpu():
        i = r.info("cpu"); return i["used_cpu_user"], i["used_cpu_sys"]
    cad = r.script_load(CAD); rs = r.script_load(REL_SLOT); rse = r.script_load(REL_SLOT_EXP)
    def multi(p, *cs):
        p.execute_command("MULTI")
        for c in cs: p.execute_command(*c)
        p.execute_command("EXEC")
    def fence(a): 
        return a[1] if isinstance(a, list) else 0
    cases = {
     "bare": (lambda p,k,t: p.set(f"b:{k}", t, nx=True, px=30000), lambda p,k,t,a: p.evalsha(cad,1,f"b:{k}",t), 1),
     "P4 MULTI{SET,HINCRBY,PEXPIRE} + rel{GET,DEL,HSET}": (lambda p,k,t: multi(p,("SET",f"x:{{{k}}}",t,"NX","PX",30000),("HINCRBY",f"x:{{{k}}}:f","f",1),("PEXPIRE",f"x:{{{k}}}:f",90000)), None, 5),
     "P4 MULTI{SET,HINCRBY} + rel{GET,DEL,HSET,PEXPIRE}": (lambda p,k,t: multi(p,("SET",f"y:{{{k}}}",t,"NX","PX",30000),("HINCRBY",f"y:{{{k}}}:f","f",1)), None, 4),
    }
    def rel_for(label, sha, pre):
        return lambda p,k,t,a: p.evalsha(sha,1,f"{pre}:{{{k}}}",t, (a[-2] if len(a)==3 else a[-1]) if isinstance(a,list) else 1)
    res = {l: [] for l in cases}
    resu = {l: [] for l in cases}
    for run in range(5):
        for label,(acq,rel,_) in cases.items():
            if rel is None:
                rel = (lambda sha,pre: (lambda p,k,t,a: p.evalsha(sha,1,f"{pre}:{{{k}}}",t, a[1] if isinstance(a,list) else 1)))(rs if label.startswith("P4 MULTI{SET,HINCRBY,PEXPIRE}") else rse, "x" if label.startswith("P4 MULTI{SET,HINCRBY,PEXPIRE}") else "y")
            tot=0; us=0
            for _ in range(ROUNDS):
                keys = random.sample(range(KEYS), BATCH); toks=[str(uuid.uuid4()) for _ in keys]
                p = r.pipeline(transaction=False)
                for k,t in zip(keys,toks): acq(p,k,t)
                u0,s0 = ucpu(); replies = p.execute()
                if len(replies) != len(keys): replies = [x for x in replies if isinstance(x, list)]
                p = r.pipeline(transaction=False)
                for k,t,a in zip(keys,toks,replies): rel(p,k,t,a)
                rr = p.execute(); u1,s1 = ucpu()
                tot += (u1-u0)+(s1-s0); us += u1-u0
            res[label].append(1e6*tot/(ROUNDS*BATCH)); resu[label].append(1e6*us/(ROUNDS*BATCH))
    bt = statistics.median(res["bare"]); bu = statistics.median(resu["bare"])
    for l in cases:
        print(f"{l}: total {statistics.median(res[l]):.2f} µs ({statistics.median(res[l])/bt:.2f}x)  user {statistics.median(resu[l]):.2f} ({statistics.median(resu[l])/bu:.2f}x)")
    print("check release replies", rr[:8])
