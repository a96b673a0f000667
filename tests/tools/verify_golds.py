#!/usr/bin/env python3
"""verify_golds.py - the v9 gold answers, computed rather than typed.

Every v9 problem (prompts/v9_holdout.jsonl, prompts/v9_probe_expanded.jsonl)
is listed here with a function that computes its answer from first
principles (exact integer / Fraction arithmetic, brute-force enumeration where
the space is small, closed forms checked against enumeration where it is not).

  python3 tests/tools/verify_golds.py          check the committed files
  python3 tests/tools/verify_golds.py --write  (re)write both files

The check fails (exit 1) when a file's gold_answer differs from the computed
one, a record is missing, or a regex verifier does not match its own gold.
The prompt texts are the project's own.
"""
import itertools
import json
import math
import re
import sys
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "prompts"


def money(x, nd=2):
    """Round half away from zero to nd decimals, as a fixed-point string."""
    q = Fraction(x) * 10**nd
    n = math.floor(q + Fraction(1, 2)) if q >= 0 else -math.floor(-q + Fraction(1, 2))
    s = f"{abs(n) // 10**nd}.{abs(n) % 10**nd:0{nd}d}"
    return ("-" if n < 0 else "") + s


def frac_str(f):
    f = Fraction(f)
    return str(f.numerator) if f.denominator == 1 else f"{f.numerator}/{f.denominator}"


# ---- competition math -------------------------------------------------------

def count_div_3_or_5_not_15_upto(n):
    return sum(1 for k in range(1, n + 1) if (k % 3 == 0 or k % 5 == 0) and k % 15)


def trailing_zeros_fact(n):
    return len(str(math.factorial(n))) - len(str(math.factorial(n)).rstrip("0"))


def digit_sum_2pow(n):
    return sum(int(c) for c in str(2**n))


def lattice_paths(a, b):
    return math.comb(a + b, a)


def derangements(n):
    return sum(1 for p in itertools.permutations(range(n)) if all(p[i] != i for i in range(n)))


def sols_x_y_z(total):  # positive integer solutions of x+y+z = total
    return sum(1 for x in range(1, total) for y in range(1, total) if total - x - y >= 1)


def last_two_digits_7pow(n):
    return f"{pow(7, n, 100):02d}"


def num_divisors(n):
    return sum(1 for d in range(1, n + 1) if n % d == 0)


def sum_primes_below(n):
    return sum(p for p in range(2, n) if all(p % q for q in range(2, int(p**0.5) + 1)))


def gcd_lcm(a, b):
    return math.gcd(a, b), a * b // math.gcd(a, b)


def fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def dice_prob_sum(target, k=2):
    hits = sum(1 for r in itertools.product(range(1, 7), repeat=k) if sum(r) == target)
    return Fraction(hits, 6**k)


def mod_inverse(a, m):
    return next(x for x in range(1, m) if a * x % m == 1)


def sum_squares(n):
    return sum(k * k for k in range(1, n + 1))


def arith_series(a1, d, n):
    return sum(a1 + d * k for k in range(n))


def triangle_area_heron(a, b, c):
    s = Fraction(a + b + c, 2)
    sq = s * (s - a) * (s - b) * (s - c)
    r = math.isqrt(sq.numerator // sq.denominator)
    assert Fraction(r * r) == sq
    return r


def circle_lattice_points(r):
    return sum(1 for x in range(-r, r + 1) for y in range(-r, r + 1) if x * x + y * y == r * r)


def crt_smallest(rems):  # [(r, m), ...]
    return next(x for x in range(1, 10**6) if all(x % m == r for r, m in rems))


def quadratic_root_sum_sq(b, c):  # x^2 + b x + c, roots r1, r2: r1^2 + r2^2
    return b * b - 2 * c


def binary_ones(n):
    return bin(n).count("1")


def handshakes(n):
    return sum(1 for _ in itertools.combinations(range(n), 2))


def three_digit_palindromes_div(k):
    return sum(1 for x in range(100, 1000) if str(x) == str(x)[::-1] and x % k == 0)


def geometric_sum(a, r, n):
    return sum(a * r**k for k in range(n))


def two_digit_count_digit_sum(s):
    return sum(1 for x in range(10, 100) if x // 10 + x % 10 == s)


# ---- physics (SI units, g stated in the prompt) -----------------------------

def free_fall_time(h, g):
    t2 = Fraction(2 * h, g)
    r = math.isqrt(t2.numerator // t2.denominator)
    if Fraction(r * r) == t2:  # exact: write it as a plain integer
        return str(r)
    return money(Fraction(math.sqrt(t2)).limit_denominator(10**12), 2)


def kinetic_energy(m, v):
    return frac_str(Fraction(m) * Fraction(v) ** 2 / 2)


def resistors_parallel(*rs):
    return frac_str(1 / sum(Fraction(1, r) for r in rs))


def ohm_power(v, r):
    return frac_str(Fraction(v) ** 2 / r)


def projectile_range(v, g):  # launched at 45 degrees on level ground
    return frac_str(Fraction(v) ** 2 / g)


def spring_period_ratio(mass_factor):
    return frac_str(Fraction(math.isqrt(mass_factor)))


def momentum_inelastic(m1, v1, m2, v2):
    return frac_str(Fraction(m1 * v1 + m2 * v2, m1 + m2))


def heat_energy(m, c, dt):
    return frac_str(Fraction(m) * c * dt)


def wave_speed(f, lam):
    return frac_str(Fraction(f) * Fraction(lam))


def braking_distance(v, a):
    return frac_str(Fraction(v) ** 2 / (2 * Fraction(a)))


def pressure_depth(rho, g, h):
    return frac_str(Fraction(rho) * Fraction(g) * Fraction(h))


def capacitor_energy(c_uf, v):  # microfarads -> joules as decimal string
    return money(Fraction(c_uf, 10**6) * v * v / 2, 4)


# ---- finance -----------------------------------------------------------------

def compound(p, rate_pct, years, n=1):
    return money(Fraction(p) * (1 + Fraction(rate_pct, 100 * n)) ** (n * years))


def simple_interest(p, rate_pct, years):
    return money(Fraction(p) * Fraction(rate_pct, 100) * years)


def loan_payment(p, annual_pct, months):
    r = Fraction(annual_pct, 1200)
    return money(Fraction(p) * r / (1 - (1 + r) ** -months))


def npv(rate_pct, flows):
    r = Fraction(rate_pct, 100)
    return money(sum(Fraction(c) / (1 + r) ** t for t, c in enumerate(flows)))


def payback_years(cost, annual):
    return frac_str(Fraction(cost, annual))


def cagr_pct(start, end, years):
    g = (end / start) ** (1 / years) - 1
    return money(Fraction(g * 100).limit_denominator(10**12), 2)


def fv_annuity(pmt, rate_pct, years):
    r = Fraction(rate_pct, 100)
    return money(Fraction(pmt) * ((1 + r) ** years - 1) / r)


def bond_price(face, coupon_pct, ytm_pct, years):
    r = Fraction(ytm_pct, 100)
    c = Fraction(face) * Fraction(coupon_pct, 100)
    return money(sum(c / (1 + r) ** t for t in range(1, years + 1)) + face / (1 + r) ** years)


def pe_price(eps, pe):
    return money(Fraction(eps) * Fraction(pe))


def discount_then_tax(price, off_pct, tax_pct):
    return money(Fraction(price) * (1 - Fraction(off_pct, 100)) * (1 + Fraction(tax_pct, 100)))


def rule_72_exact_years(rate_pct):  # whole years until money at least doubles
    y, v = 0, Fraction(1)
    while v < 2:
        v *= 1 + Fraction(rate_pct, 100)
        y += 1
    return y


def gross_margin_pct(revenue, cogs):
    return money(Fraction(revenue - cogs, revenue) * 100, 1)


# ---- the problems ------------------------------------------------------------
# (id, category, prompt, gold, verifier); a regex verifier's pattern is built
# from the computed value and must match the computed value written plainly.

def holdout():
    return [
        ("v9h_001", "math_holdout", "一个数列前两项为 1、1,之后每项等于前两项之和。第 30 项是多少?只给出最终数字。",
         str(fib(30)), "string_match"),
        ("v9h_002", "finance_holdout", "An investor puts 10000 dollars into an account paying 5% per year, compounded annually. "
         "What is the balance after 10 years, rounded to the cent? Give the number only.", compound(10000, 5, 10), "string_match"),
        ("v9h_003", "physics_holdout", "一辆汽车以 20 m/s 的速度行驶,以 4 m/s² 的加速度匀减速刹车。刹车距离是多少米?",
         braking_distance(20, 4), "string_match"),
        ("v9h_004", "math_holdout", "How many positive integers up to 1000 are divisible by 3 or 5 but not by 15?",
         str(count_div_3_or_5_not_15_upto(1000)), "string_match"),
        ("v9h_005", "finance_holdout", "一笔 200000 元的贷款,年利率 6%,按月等额本息还款 240 个月。每月还款额是多少元(保留两位小数)?",
         loan_payment(200000, 6, 240), "string_match"),
        ("v9h_006", "math_holdout", "100! 的末尾有多少个连续的 0?",
         str(trailing_zeros_fact(100)), "string_match"),
        ("v9h_007", "physics_holdout", "Three resistors of 6, 3 and 2 ohms are connected in parallel. What is the equivalent resistance in ohms?",
         resistors_parallel(6, 3, 2), "regex"),
        ("v9h_008", "finance_holdout", "A project costs 1000 today and returns 400 at the end of each of the next 3 years. "
         "At a 10% discount rate, what is its NPV, rounded to the cent?", npv(10, [-1000, 400, 400, 400]), "string_match"),
        ("v9h_009", "math_holdout", "从 5×5 方格的左下角走到右上角,每步只能向右或向上走一格,共有多少条不同路径?",
         str(lattice_paths(5, 5)), "string_match"),
        ("v9h_010", "math_holdout", "What is the smallest positive integer that leaves remainder 2 when divided by 3, "
         "remainder 3 when divided by 5, and remainder 2 when divided by 7?", str(crt_smallest([(2, 3), (3, 5), (2, 7)])), "string_match"),
    ]


def probe():
    p = []
    add = p.append
    # competition math
    add(("v9p_001", "math", "2 的 100 次方的各位数字之和是多少?", str(digit_sum_2pow(100)), "string_match"))
    add(("v9p_002", "math", "How many derangements of 6 objects are there (permutations with no fixed point)?", str(derangements(6)), "string_match"))
    add(("v9p_003", "math", "方程 x + y + z = 12 有多少组正整数解?", str(sols_x_y_z(12)), "string_match"))
    add(("v9p_004", "math", "What are the last two digits of 7^2024?", last_two_digits_7pow(2024), "regex"))
    add(("v9p_005", "math", "720 有多少个正因数?", str(num_divisors(720)), "string_match"))
    add(("v9p_006", "math", "What is the sum of all primes below 100?", str(sum_primes_below(100)), "string_match"))
    g, l = gcd_lcm(84, 126)
    add(("v9p_007", "math", "求 84 和 126 的最小公倍数。", str(l), "string_match"))
    add(("v9p_008", "math", "What is the greatest common divisor of 84 and 126?", str(g), "regex"))
    add(("v9p_009", "math", "掷两枚均匀骰子,点数之和为 7 的概率是多少?用最简分数表示。", frac_str(dice_prob_sum(7)), "string_match"))
    add(("v9p_010", "math", "Roll three fair dice. What is the probability that the sum is 10? Give a reduced fraction.", frac_str(dice_prob_sum(10, 3)), "string_match"))
    add(("v9p_011", "math", "求 17 在模 43 下的乘法逆元(1 到 42 之间)。", str(mod_inverse(17, 43)), "string_match"))
    add(("v9p_012", "math", "Compute 1^2 + 2^2 + ... + 50^2.", str(sum_squares(50)), "string_match"))
    add(("v9p_013", "math", "等差数列首项为 7,公差为 4,求前 25 项之和。", str(arith_series(7, 4, 25)), "string_match"))
    add(("v9p_014", "math", "A triangle has sides 13, 14 and 15. What is its area?", str(triangle_area_heron(13, 14, 15)), "string_match"))
    add(("v9p_015", "math", "圆 x² + y² = 25 上有多少个整点(横纵坐标都是整数)?", str(circle_lattice_points(5)), "string_match"))
    add(("v9p_016", "math", "If r1 and r2 are the roots of x^2 - 7x + 3 = 0, what is r1^2 + r2^2?", str(quadratic_root_sum_sq(-7, 3)), "string_match"))
    add(("v9p_017", "math", "2025 的二进制表示中有多少个 1?", str(binary_ones(2025)), "regex"))
    add(("v9p_018", "math", "At a meeting of 23 people everyone shakes hands with everyone else exactly once. How many handshakes?", str(handshakes(23)), "string_match"))
    add(("v9p_019", "math", "有多少个三位回文数能被 11 整除?", str(three_digit_palindromes_div(11)), "string_match"))
    add(("v9p_020", "math", "What is 3 + 6 + 12 + ... (10 terms, each term double the previous)?", str(geometric_sum(3, 2, 10)), "string_match"))
    add(("v9p_021", "math", "各位数字之和为 9 的两位数有多少个?", str(two_digit_count_digit_sum(9)), "string_match"))
    add(("v9p_022", "math", "What is the 40th Fibonacci number if F1 = F2 = 1?", str(fib(40)), "string_match"))
    add(("v9p_023", "math", "用 1、2、3、4、5 组成没有重复数字的五位数,其中偶数有多少个?",
         str(sum(1 for q in itertools.permutations("12345") if int(q[-1]) % 2 == 0)), "string_match"))
    add(("v9p_024", "math", "How many subsets of {1,2,...,10} have an even sum? (Count the empty set.)",
         str(sum(1 for k in range(11) for c in itertools.combinations(range(1, 11), k) if sum(c) % 2 == 0)), "string_match"))
    add(("v9p_025", "math", "求满足 n² < 2026 的最大正整数 n。", str(math.isqrt(2025)), "regex"))
    add(("v9p_026", "math", "How many 4-digit numbers have digits that are strictly increasing from left to right?",
         str(sum(1 for x in range(1000, 10000) if list(str(x)) == sorted(set(str(x))) and len(set(str(x))) == 4)), "string_match"))
    # physics
    add(("v9p_027", "physics", "一个质量为 2 kg 的物体以 3 m/s 的速度运动,它的动能是多少焦耳?", kinetic_energy(2, 3), "string_match"))
    add(("v9p_028", "physics", "A ball is dropped from 45 m. Taking g = 10 m/s^2 and ignoring air resistance, how many seconds until it lands?", free_fall_time(45, 10), "regex"))
    add(("v9p_029", "physics", "12 V 电压加在 4 Ω 电阻上,电阻消耗的功率是多少瓦?", ohm_power(12, 4), "string_match"))
    add(("v9p_030", "physics", "A projectile is launched at 45 degrees with speed 30 m/s on level ground. Taking g = 10 m/s^2, what is its range in metres?", projectile_range(30, 10), "string_match"))
    add(("v9p_031", "physics", "弹簧振子的质量变为原来的 9 倍,周期变为原来的几倍?", spring_period_ratio(9), "regex"))
    add(("v9p_032", "physics", "A 3 kg cart moving at 4 m/s collides and sticks to a 1 kg cart at rest. What is their common speed in m/s?", momentum_inelastic(3, 4, 1, 0), "string_match"))
    add(("v9p_033", "physics", "把 2 kg 水从 20°C 加热到 70°C,水的比热容取 4200 J/(kg·°C),需要吸收多少焦耳的热量?", heat_energy(2, 4200, 50), "string_match"))
    add(("v9p_034", "physics", "A wave has frequency 50 Hz and wavelength 6.8 m. What is its speed in m/s?", wave_speed(50, Fraction(68, 10)), "string_match"))
    add(("v9p_035", "physics", "水深 15 m 处由水产生的压强是多少帕?水的密度取 1000 kg/m³,g 取 10 m/s²。", pressure_depth(1000, 10, 15), "string_match"))
    add(("v9p_036", "physics", "A 470 microfarad capacitor is charged to 20 V. How much energy does it store, in joules (4 decimals)?", capacitor_energy(470, 20), "string_match"))
    add(("v9p_037", "physics", "一辆车以 30 m/s 行驶,刹车加速度大小为 5 m/s²,刹车距离是多少米?", braking_distance(30, 5), "string_match"))
    add(("v9p_038", "physics", "Resistors of 4 ohms and 12 ohms are in parallel. What is the equivalent resistance in ohms?", resistors_parallel(4, 12), "regex"))
    add(("v9p_039", "physics", "从 80 m 高处自由落下的物体,g 取 10 m/s²,落地需要多少秒?", free_fall_time(80, 10), "string_match"))
    add(("v9p_040", "physics", "A 0.5 kg ball moves at 8 m/s. What is its kinetic energy in joules?", kinetic_energy(Fraction(1, 2), 8), "string_match"))
    # finance
    add(("v9p_041", "finance", "本金 5000 元,年利率 4%,按单利计算 3 年的利息是多少元?", simple_interest(5000, 4, 3), "string_match"))
    add(("v9p_042", "finance", "What does 2500 grow to after 6 years at 8% per year compounded annually? Round to the cent.", compound(2500, 8, 6), "string_match"))
    add(("v9p_043", "finance", "10000 元存 2 年,年利率 6%,按月复利,到期本息合计多少元(保留两位小数)?", compound(10000, 6, 2, 12), "string_match"))
    add(("v9p_044", "finance", "A 30-year mortgage of 300000 at 4.5% annual interest, paid monthly. What is the monthly payment, rounded to the cent?", loan_payment(300000, Fraction(9, 2), 360), "string_match"))
    add(("v9p_045", "finance", "某项目投资 5000 元,此后 4 年每年末回收 1500 元,折现率 8%,净现值是多少元(保留两位小数)?", npv(8, [-5000, 1500, 1500, 1500, 1500]), "string_match"))
    add(("v9p_046", "finance", "A machine costs 36000 and saves 9600 per year. What is the simple payback period in years?", payback_years(36000, 9600), "regex"))
    add(("v9p_047", "finance", "公司营收从 200 万元在 5 年内增长到 322.1 万元,年复合增长率是多少百分比(保留两位小数)?", cagr_pct(200, 322.1, 5), "string_match"))
    add(("v9p_048", "finance", "Saving 1000 at the end of every year for 10 years at 5% per year, what is the future value? Round to the cent.", fv_annuity(1000, 5, 10), "string_match"))
    add(("v9p_049", "finance", "面值 1000 元、票面利率 6%、每年付息一次、还有 5 年到期的债券,到期收益率 8% 时价格是多少元(保留两位小数)?", bond_price(1000, 6, 8, 5), "string_match"))
    add(("v9p_050", "finance", "A stock has earnings per share of 3.40 and trades at a P/E of 18. What is its price?", pe_price(Fraction(34, 10), 18), "string_match"))
    add(("v9p_051", "finance", "一件标价 880 元的商品打八五折后再加 13% 的增值税,最终价格是多少元?", discount_then_tax(880, 15, 13), "string_match"))
    add(("v9p_052", "finance", "At 7% per year compounded annually, after how many whole years does an investment first at least double?", str(rule_72_exact_years(7)), "regex"))
    add(("v9p_053", "finance", "营收 1250 万元,营业成本 775 万元,毛利率是多少(百分比,保留一位小数)?", gross_margin_pct(1250, 775), "string_match"))
    add(("v9p_054", "finance", "What is the simple interest on 12000 at 3.5% per year for 4 years?", simple_interest(12000, Fraction(7, 2), 4), "string_match"))
    return p


def pattern_for(gold):
    """A regex that accepts the gold as a whole number (no digit glued on)."""
    return r"(?<![0-9.])" + re.escape(gold) + r"(?![0-9])"


def records(items):
    out = []
    for pid, cat, prompt, gold, verifier in items:
        rec = {"id": pid, "category": cat, "prompt": prompt, "verifier": verifier}
        rec["gold_answer"] = pattern_for(gold) if verifier == "regex" else gold
        rec["answer"] = gold
        out.append(rec)
    return out


def check_file(path, expected):
    ok = True
    got = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            r = json.loads(line)
            got[r["id"]] = r
    for rec in expected:
        r = got.get(rec["id"])
        if r is None:
            print(f"{path.name}: missing {rec['id']}")
            ok = False
            continue
        if r["gold_answer"] != rec["gold_answer"] or r["verifier"] != rec["verifier"]:
            print(f"{path.name}: {rec['id']}: gold {r['gold_answer']!r} != computed {rec['gold_answer']!r}")
            ok = False
        if r["verifier"] == "regex" and not re.search(r["gold_answer"], f"answer: {rec['answer']}."):
            print(f"{path.name}: {rec['id']}: regex does not match its own answer")
            ok = False
        if r["verifier"] == "string_match" and rec["answer"] not in f"answer: {rec['answer']}.":
            ok = False
    return ok


def main():
    sets = {"v9_holdout.jsonl": records(holdout()), "v9_probe_expanded.jsonl": records(probe())}
    if "--write" in sys.argv:
        for name, recs in sets.items():
            with open(ROOT / name, "w", encoding="utf-8") as f:
                for r in recs:
                    f.write(json.dumps(r, ensure_ascii=False) + "\n")
            print(f"wrote {name}: {len(recs)} records")
        return 0
    ok = all(check_file(ROOT / name, recs) for name, recs in sets.items())
    for name, recs in sets.items():
        print(f"{name}: {len(recs)} golds {'verified' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
