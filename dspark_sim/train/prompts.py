"""Training prompts for self-distillation: GSM8K train (math), project-written code and chat
prompts generated from templates, and user JSONL files.

The evaluation sets (GSM8K test, HumanEval, MT-Bench) are never used here.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from itertools import product
from pathlib import Path

import numpy as np

from ..errors import InputError


@dataclass(frozen=True)
class TrainPrompt:
    """One user turn to be answered by the target."""

    id: str
    task: str
    text: str


def read_prompt_jsonl(path: str | Path, task: str | None = None) -> list[TrainPrompt]:
    """Prompts of a JSONL file (the decode core's loader: 'prompt', 'question' or 'turns[0]',
    optional 'task'); ids are FILESTEM-LINE. Errors name FILE:LINE."""
    from ..decode.prompts import load_prompts

    out = []
    for p in load_prompts(path, task):
        line = p.source.rsplit(":", 1)[-1]
        out.append(TrainPrompt(id=f"{Path(path).stem}-{line}", task=p.task, text=p.text))
    return out


# The GSM8K *train* questions the defaults use, shipped with the package (GSM8K is MIT-licensed;
# GSM8K-LICENSE beside it): with seed 0 the first GSM8K_SUBSET_TRAIN questions of the seeded
# permutation (distill's default mix takes 1,200) and the last GSM8K_SUBSET_HELDOUT (calibrate's
# held-out prompts), each with its line index in the full train.jsonl
# (scripts/ship_gsm8k_subset.py). None of them is a GSM8K *test* question, which the shipped
# acceptance profiles measure.
GSM8K_SUBSET = Path(__file__).resolve().parent.parent / "data" / "prompts" / "gsm8k-train-subset.jsonl"
GSM8K_SUBSET_TRAIN = 1200
GSM8K_SUBSET_HELDOUT = 100


def _read_subset(path: Path) -> tuple[dict[int, str], int]:
    """The shipped subset: question text by train.jsonl line index, and the full file's rows."""
    from ..traces.schema import iter_json_lines

    questions, total = {}, 0
    for _lineno, row in iter_json_lines(path, "GSM8K subset"):
        questions[int(row["index"])] = str(row["question"])
        total = int(row["of"])
    if not questions:
        raise InputError("no questions", file=path)
    return questions, total


class _MathPool:
    """GSM8K train questions by their line index in train.jsonl: a full file, or the shipped
    subset (which holds only the indices the seed-0 defaults draw)."""

    def __init__(self, gsm8k_train: str | Path | None) -> None:
        if gsm8k_train is None:
            self.path = GSM8K_SUBSET
            self.questions, self.total = _read_subset(GSM8K_SUBSET)
            self.subset = True
        else:
            self.path = Path(gsm8k_train)
            rows = read_prompt_jsonl(gsm8k_train, task="math")
            self.questions, self.total = {i: r.text for i, r in enumerate(rows)}, len(rows)
            self.subset = False

    def prompts(self, idx) -> list[TrainPrompt]:
        missing = [int(i) for i in idx if int(i) not in self.questions]
        if missing:
            raise InputError(f"the shipped GSM8K train subset holds only the questions of the "
                             f"default settings (seed 0: {GSM8K_SUBSET_TRAIN} training and "
                             f"{GSM8K_SUBSET_HELDOUT} held-out questions); {len(missing)} asked for "
                             f"are not in it: pass the full train.jsonl with --gsm8k-train",
                             file=self.path, field="--gsm8k-train")
        return [TrainPrompt(id=f"gsm8k-train-{int(i)}", task="math", text=self.questions[int(i)])
                for i in idx]


def _math_pool(gsm8k_train: str | Path | None, seed: int) -> tuple[_MathPool, np.ndarray,
                                                                    np.random.Generator]:
    """GSM8K train questions (None: the shipped subset), their seeded permutation, and the
    generator that then fills chat templates (training and held-out sets draw from these same
    pools)."""
    pool = _MathPool(gsm8k_train)
    rng = np.random.default_rng(seed)
    return pool, rng.permutation(pool.total), rng


# --- code: HumanEval-style signatures + docstrings, and plain requests, from templates ------

_CODE_SUBJECTS = [
    ("numbers", "list[int]", "a list of integers"),
    ("values", "list[float]", "a list of floats"),
    ("words", "list[str]", "a list of words"),
    ("text", "str", "a string"),
    ("matrix", "list[list[int]]", "a matrix given as a list of rows"),
    ("pairs", "list[tuple[int, int]]", "a list of (x, y) pairs"),
    ("n", "int", "a positive integer n"),
    ("counts", "dict[str, int]", "a dictionary from names to counts"),
]
_CODE_GOALS = {
    "list[int]": [("sum_of_even", "int", "Return the sum of the even numbers in {d}."),
                  ("count_positive", "int", "Return how many numbers in {d} are strictly positive."),
                  ("second_largest", "int", "Return the second largest distinct value in {d}, or None if there is none."),
                  ("running_max", "list[int]", "Return the running maximum of {d}."),
                  ("remove_duplicates", "list[int]", "Return {d} without duplicates, keeping the first occurrence order."),
                  ("longest_increasing_run", "int", "Return the length of the longest strictly increasing contiguous run in {d}."),
                  ("pairwise_differences", "list[int]", "Return the differences between consecutive elements of {d}."),
                  ("is_palindrome_list", "bool", "Return True if {d} reads the same forwards and backwards."),
                  ("product_except_self", "list[int]", "For each position of {d}, return the product of all other elements."),
                  ("majority_element", "int", "Return the element that appears more than half the time in {d}, or -1.")],
    "list[float]": [("mean_and_std", "tuple[float, float]", "Return the mean and the population standard deviation of {d}."),
                    ("normalize", "list[float]", "Scale {d} linearly so that the minimum becomes 0 and the maximum 1."),
                    ("moving_average", "list[float]", "Return the moving average of {d} over a window of 3."),
                    ("closest_pair", "tuple[float, float]", "Return the two closest values in {d}, smaller first."),
                    ("median", "float", "Return the median of {d}."),
                    ("clip_values", "list[float]", "Clip every value of {d} to the range [0, 1].")],
    "list[str]": [("longest_word", "str", "Return the longest word in {d}; on ties return the first one."),
                  ("group_anagrams", "list[list[str]]", "Group the anagrams in {d} together."),
                  ("count_vowel_words", "int", "Return how many entries of {d} start with a vowel."),
                  ("join_capitalized", "str", "Capitalize every entry of {d} and join them with spaces."),
                  ("word_lengths", "dict[str, int]", "Map every entry of {d} to its length."),
                  ("filter_by_prefix", "list[str]", "Return the entries of {d} that start with 'pre'.")],
    "str": [("reverse_words", "str", "Return {d} with the order of its words reversed."),
            ("is_balanced", "bool", "Return True if the brackets '()[]{{}}' in {d} are balanced."),
            ("count_vowels", "int", "Return the number of vowels in {d}."),
            ("compress", "str", "Run-length encode {d}, for example 'aaab' becomes 'a3b1'."),
            ("to_snake_case", "str", "Convert {d} written in CamelCase to snake_case."),
            ("first_unique_char", "int", "Return the index of the first character of {d} that appears once, or -1."),
            ("is_valid_ipv4", "bool", "Return True if {d} is a valid dotted IPv4 address."),
            ("caesar_shift", "str", "Shift every letter of {d} three places forward in the alphabet.")],
    "list[list[int]]": [("transpose", "list[list[int]]", "Return the transpose of {d}."),
                        ("row_sums", "list[int]", "Return the sum of every row of {d}."),
                        ("spiral_order", "list[int]", "Return the elements of {d} in clockwise spiral order."),
                        ("max_in_columns", "list[int]", "Return the maximum of every column of {d}."),
                        ("diagonal_sum", "int", "Return the sum of the main diagonal of {d}.")],
    "int": [("is_prime", "bool", "Return True if {d} is a prime number."),
            ("digit_sum", "int", "Return the sum of the decimal digits of {d}."),
            ("to_binary", "str", "Return the binary representation of {d} as a string."),
            ("factorial", "int", "Return the factorial of {d}."),
            ("collatz_steps", "int", "Return how many Collatz steps it takes {d} to reach 1."),
            ("fizzbuzz", "list[str]", "Return the FizzBuzz sequence from 1 up to {d}."),
            ("count_divisors", "int", "Return the number of positive divisors of {d}."),
            ("nth_fibonacci", "int", "Return the Fibonacci number at index {d}.")],
    "dict[str, int]": [("top_key", "str", "Return the key of {d} with the largest value."),
                       ("invert", "dict[int, list[str]]", "Invert {d}, mapping each value to the list of its keys."),
                       ("total_value", "int", "Return the sum of all values in {d}."),
                       ("filter_small", "dict[str, int]", "Return {d} without the entries whose value is below 10.")],
    "list[tuple[int, int]]": [("sort_by_distance", "list[tuple[int, int]]", "Sort {d} by distance from the origin."),
                              ("bounding_box", "tuple[int, int, int, int]", "Return (min_x, min_y, max_x, max_y) of {d}."),
                              ("count_in_first_quadrant", "int", "Return how many points of {d} have x > 0 and y > 0."),
                              ("merge_intervals", "list[tuple[int, int]]", "Treat {d} as intervals and merge the overlapping ones.")],
}
_GOAL_REQUESTS = [
    "Write a Python function to {goal}",
    "Implement a Python function to solve this: {goal} Include a short explanation.",
    "Write an efficient Python function for the following task and state its time complexity. {goal}",
    "Using only the standard library, write Python code that does this: {goal} Show an example call.",
    "Write a Python function with type hints and a docstring. Task: {goal}",
]
_CODE_REQUESTS = [
    "Write a Python class called {cls} with methods to add items, remove items and report the {what}.",
    "Explain what this Python code does and suggest an improvement:\n\n{snippet}",
    "Write a Python script that reads a CSV file named {file} and prints the {what} of the '{col}' column.",
    "Write a unit test with pytest for a function `{name}` that should {behaviour}.",
]
_CODE_CLASSES = [("Inventory", "total count"), ("TodoList", "number of open tasks"),
                 ("BankAccount", "current balance"), ("Playlist", "total duration"),
                 ("LibraryCatalog", "number of borrowed books"), ("ShoppingCart", "total price")]
_CODE_SNIPPETS = [
    "def f(xs):\n    out = []\n    for x in xs:\n        if x not in out:\n            out.append(x)\n    return out",
    "total = 0\nfor i in range(len(items)):\n    total = total + items[i] * 2\nprint(total)",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)",
    "words = open('a.txt').read().split()\ncounts = {}\nfor w in words:\n    counts[w] = counts.get(w, 0) + 1",
    "def find(xs, t):\n    for i in range(len(xs)):\n        if xs[i] == t:\n            return i\n    return -1",
]
_CSV = [("sales.csv", "price"), ("students.csv", "score"), ("weather.csv", "temperature"),
        ("orders.csv", "quantity")]
_STATS = ["average", "maximum", "median", "sum"]
_TESTS = [("is_prime", "return True only for prime numbers"),
          ("slugify", "turn a title into a lowercase URL slug"),
          ("parse_date", "parse dates written as YYYY-MM-DD"),
          ("flatten", "flatten nested lists of any depth")]


def _signature_prompt(name: str, arg: str, arg_type: str, ret: str, doc: str) -> str:
    return f'def {name}({arg}: {arg_type}) -> {ret}:\n    """{doc}\n    """\n'


def code_prompts() -> list[TrainPrompt]:
    """Code prompts from templates: HumanEval-style stubs plus plain programming requests."""
    texts: list[str] = []
    for arg, arg_type, desc in _CODE_SUBJECTS:
        for name, ret, goal in _CODE_GOALS[arg_type]:
            texts.append(_signature_prompt(name, arg, arg_type, ret, goal.format(d=arg)))
            sentence = goal.format(d=desc)
            texts.append(_GOAL_REQUESTS[0].format(goal=sentence[0].lower() + sentence[1:].rstrip(".")
                                                  + f" (name it `{name}`)."))
            texts.extend(tpl.format(goal=sentence) for tpl in _GOAL_REQUESTS[1:])
    for cls, what in _CODE_CLASSES:
        texts.append(_CODE_REQUESTS[0].format(cls=cls, what=what))
    for snippet in _CODE_SNIPPETS:
        texts.append(_CODE_REQUESTS[1].format(snippet=snippet))
    for (file, col), stat in product(_CSV, _STATS):
        texts.append(_CODE_REQUESTS[2].format(file=file, what=stat, col=col))
    for name, behaviour in _TESTS:
        texts.append(_CODE_REQUESTS[3].format(name=name, behaviour=behaviour))
    return [TrainPrompt(id=f"code-tpl-{i}", task="code", text=t) for i, t in enumerate(texts)]


# --- chat: writing, roleplay, reasoning, extraction, STEM and humanities, from templates -------

_CHAT_TEMPLATES = [
    "Write a short {form} about {topic}.",
    "Explain {concept} to {audience}.",
    "What are the main advantages and disadvantages of {thing}?",
    "Give me {n} practical tips for {activity}.",
    "Imagine you are {persona}. Describe a typical day in your life.",
    "Compare {a} and {b} in a few paragraphs.",
    "Summarize the key ideas of {concept} in simple terms.",
    "Draft a polite email to {recipient} about {matter}.",
    "Extract the names of all people and places from this text: \"{passage}\"",
    "Why is {concept} important in everyday life?",
    "Write a persuasive paragraph arguing for {thing}.",
    "Pretend you are {persona} and answer: what is the hardest part of your job?",
    "Plan a {days}-day trip to {place} with activities for each day.",
    "Describe {place} to someone who has never been there.",
    "Write a dialogue between {persona} and {audience} about {concept}.",
    "List the steps needed for {activity}, and explain why each matters.",
    "What would happen if {hypothetical}? Think it through step by step.",
    "Rewrite this sentence in a more formal tone: \"{casual}\"",
    "Suggest a name and a slogan for {business}, and explain your choice.",
    "Write a {form} for {audience} about {topic}.",
]
_PLACES = ["Rome", "Kyoto", "the Scottish Highlands", "New York", "Iceland", "Cape Town",
           "Buenos Aires", "a tropical island"]
_HYPOTHETICALS = ["the internet disappeared for a week", "humans could breathe underwater",
                  "every car were electric", "the moon were twice as close",
                  "nobody needed to sleep", "schools taught only through games"]
_CASUAL = ["hey, can u send me the file asap?", "gonna be late, sorry!",
           "this idea is kinda bad tbh", "thanks a ton for the help, you rock"]
_BUSINESSES = ["a bicycle repair shop", "a vegan bakery", "a language school", "a pet hotel",
               "a cloud storage startup", "a bookshop cafe"]
_FORMS = ["poem", "story", "blog post", "speech", "product description", "diary entry"]
_TOPICS = ["the ocean at night", "a city in the rain", "learning to ride a bike", "a lost robot",
           "friendship", "the first day of school", "a journey to Mars", "an old library",
           "autumn in the mountains", "a small bakery"]
_CONCEPTS = ["photosynthesis", "inflation", "gravity", "machine learning", "the water cycle",
             "supply and demand", "climate change", "the immune system", "democracy",
             "compound interest", "plate tectonics", "the scientific method"]
_AUDIENCES = ["a ten-year-old", "a high school student", "a busy manager", "my grandmother"]
_THINGS = ["remote work", "electric cars", "social media", "nuclear energy", "online learning",
           "living in a big city", "public transport", "renewable energy"]
_ACTIVITIES = ["studying for exams", "saving money", "sleeping better", "learning a new language",
               "staying healthy while travelling", "public speaking", "managing time at work"]
_PERSONAS = ["a lighthouse keeper", "a medieval blacksmith", "an astronaut on the space station",
             "a chef in a busy restaurant", "a detective in London", "a farmer in the 1800s"]
_PAIRS = [("cats", "dogs as pets"), ("tea", "coffee"), ("books", "films"), ("Python", "JavaScript"),
          ("summer", "winter"), ("trains", "planes for travel")]
_RECIPIENTS = ["my landlord", "a colleague", "my professor", "a customer", "the city council"]
_MATTERS = ["a delayed project", "a broken heater", "a meeting next week", "a refund request"]
_PASSAGES = ["Maria flew from Lisbon to Tokyo to meet her brother Kenji.",
             "In Paris, Jean and Aisha opened a cafe near the river.",
             "Professor Lee visited Nairobi and Cairo with her student Omar."]


def chat_prompts(rng: np.random.Generator, n: int) -> list[TrainPrompt]:
    """`n` distinct chat prompts filled from templates with a seeded generator."""
    fills = {
        "form": _FORMS, "topic": _TOPICS, "concept": _CONCEPTS, "audience": _AUDIENCES,
        "thing": _THINGS, "n": ["three", "five", "seven"], "activity": _ACTIVITIES,
        "persona": _PERSONAS, "recipient": _RECIPIENTS, "matter": _MATTERS, "passage": _PASSAGES,
        "days": ["two", "three", "five"], "place": _PLACES, "hypothetical": _HYPOTHETICALS,
        "casual": _CASUAL, "business": _BUSINESSES,
    }
    seen: set[str] = set()
    out: list[TrainPrompt] = []
    attempts = 0
    while len(out) < n and attempts < 50 * n:
        attempts += 1
        tpl = _CHAT_TEMPLATES[int(rng.integers(len(_CHAT_TEMPLATES)))]
        a, b = _PAIRS[int(rng.integers(len(_PAIRS)))]
        values = {k: v[int(rng.integers(len(v)))] for k, v in fills.items()}
        text = tpl.format(a=a, b=b, **values)
        if text not in seen:
            seen.add(text)
            out.append(TrainPrompt(id=f"chat-tpl-{len(out)}", task="chat", text=text))
    return out


def is_heldout(prompt_id: str, fraction: float = 0.15) -> bool:
    """Template prompts reserved for calibration rollouts (a stable hash of the id)."""
    h = int(hashlib.sha256(prompt_id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return prompt_id.startswith(("code-tpl-", "chat-tpl-")) and h < fraction


def default_training_prompts(gsm8k_train: str | Path | None, n_math: int, n_chat: int,
                             seed: int) -> list[TrainPrompt]:
    """The embedded mix: the first `n_math` questions of a seeded GSM8K *train* permutation
    (`gsm8k_train` None: from the shipped subset), the code templates and `n_chat` chat
    templates, without the held-out prompts."""
    pool, perm, rng = _math_pool(gsm8k_train, seed)
    prompts = pool.prompts(sorted(perm[:n_math]))
    prompts += code_prompts() + chat_prompts(rng, n_chat)
    return [p for p in prompts if not is_heldout(p.id)]


def heldout_prompts(gsm8k_train: str | Path | None, n_per_task: int, seed: int,
                    chat_pool: int = 2000) -> list[TrainPrompt]:
    """Calibration prompts never trained on: GSM8K train questions from the far end of the
    training permutation (`gsm8k_train` None: from the shipped subset), and held-out code and
    chat templates."""
    pool, perm, rng = _math_pool(gsm8k_train, seed)
    math = pool.prompts(perm[::-1][:n_per_task])
    code = [p for p in code_prompts() if is_heldout(p.id)][:n_per_task]
    chat = [p for p in chat_prompts(rng, chat_pool) if is_heldout(p.id)][:n_per_task]
    return math + code + chat
