"""Reading people's words: the text layer of the offline planner.

Folding (width, case, Traditional → Simplified for the characters people type in commands), tokens
(each Chinese character, each Latin word reduced to a stem so "grinding" meets "grind"), counts in every
form people write them ("3", "x3", "三次", "十二遍", "twice", "three times", but not "一下"/"一点"),
and the small words that carry no request of their own ("帮我…吧", "please", "the").
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass

# Traditional characters people type in commands, and their Simplified form. Not a converter for
# prose: the characters of requests (verbs, game and device words, numbers, question words).
_T2S = str.maketrans(
    "遊戲開啟動關閉結束執行確認認幫給讓這那個們麼嗎沒後臺時間進度狀態現實訓練經驗書幣錢買賣掛機"
    "循環續繼會說話請讀寫刪除檢查查詢詢問題與並於從來對應當讓寶藏華憶記憶點數兩萬億幾隻條張輪遍"
    "次場盤塊變換轉掃廚庫車廳臥衛書間潔淨電腦網頁載屬級號碼價錢錯誤盡儘護獵豐饒識諧無雷霧風聲"
    "遺器稀有級別種類選擇開關停止暫繼續頭夠還這裡邊麼樣嗎呢嘛囉啦喔們為甚麼樣"
    "測試雲圖導覽們說話語聽見視應該讓讓該爲麽",
    "游戏开启动关闭结束执行确认认帮给让这那个们么吗没后台时间进度状态现实训练经验书币钱买卖挂机"
    "循环续继会说话请读写删除检查查询询问题与并于从来对应当让宝藏华忆记忆点数两万亿几只条张轮遍"
    "次场盘块变换转扫厨库车厅卧卫书间洁净电脑网页载属级号码价钱错误尽尽护猎丰饶识谐无雷雾风声"
    "遗器稀有级别种类选择开关停止暂继续头够还这里边么样吗呢嘛啰啦喔们为什么样"
    "测试云图导览们说话语听见视应该让让该为么",
)

CJK = re.compile(r"[\u3400-\u9fff]")
TOKEN = re.compile(r"[\u3400-\u9fff]|[^\W\u3400-\u9fff_]+(?:['’][a-z]+)?")


def fold(text: str) -> str:
    """NFKC width folding, case folding, Traditional → Simplified, one space between words."""
    text = unicodedata.normalize("NFKC", text).casefold().translate(_T2S).replace("’", "'")
    return " ".join(text.split())


# "把游戏关了" → "关游戏": the 把 construction puts the object before its verb; put it back.
BA = re.compile(
    r"把(.{1,12}?)(关掉|关上|关闭|关|打开|开启|启动|开|退出|分解|卖掉|卖|刷|停掉|停止|停|清理|打扫|扫|重置|删掉|删除)"
    r"(?:了|掉|上|完)?"
)


# "开一下游戏", "关掉游戏", "分解掉遗器": a particle between a verb and its object says nothing more.
PARTICLE = re.compile(
    r"(开|关|启动|打开|关闭|退出|刷|分解|打扫|扫|停)(?:一下|下|掉|了|上|完)(?=[\u3400-\u9fff])"
)
# "游戏可以关了", "二星遗器全分解了": the object said first, the verb last; the verb goes first. Only
# verbs that cannot be a question's "刷了" or a state's "开了吗" (the sentence must end at the verb), and
# only when what comes before is one object (no other verb, no connective: "开游戏然后退出" stays).
TRAILING_VERB = re.compile(
    r"^([^把不别没开启刷做打退关分删卖然再后和跟，,、。；;\s]{1,12}?)(?:可以|都|全部?|也)?(关掉|关上|关闭|关|退出|分解|卖掉|删掉|删除)(?:了|掉|吧|一下)*$"
)
# "start up the game", "boot up the game": the particle says nothing the verb does not.
PHRASAL = re.compile(r"\b(start|boot|fire|spin|open) up\b")
# "开游戏 刷金币": a space between two Chinese phrases separates two requests.
CJK_SPACE = re.compile(r"(?<=[\u3400-\u9fff])\s+(?=[\u3400-\u9fff])")


def reorder(text: str) -> str:
    text = BA.sub(lambda m: m.group(2) + m.group(1), text)
    text = TRAILING_VERB.sub(lambda m: m.group(2) + m.group(1), text)
    text = PHRASAL.sub(lambda m: m.group(1), text)
    text = PARTICLE.sub(lambda m: m.group(1), text)
    return CJK_SPACE.sub("，", text)


def has_cjk(text: str) -> bool:
    return CJK.search(text) is not None


def stem(word: str) -> str:
    """A light English stem: farming/farmed/farms → farm, running → run, closing/close → clos."""
    if CJK.match(word) or word.isdigit() or len(word) <= 3:
        return word
    w = word.removesuffix("'s")
    if w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith(("sses", "shes", "ches", "xes", "zes")):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    for suffix in ("ing", "ed"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            w = w[: -len(suffix)]
            if len(w) >= 3 and w[-1] == w[-2] and w[-1] not in "lsz":
                w = w[:-1]  # running → run
            break
    if w.endswith("e") and len(w) > 3:
        w = w[:-1]
    if w.endswith("y") and len(w) > 3:
        w = w[:-1] + "i"
    return w


@dataclass(frozen=True, slots=True)
class Token:
    start: int
    end: int
    text: str
    stem: str


def tokens(text: str) -> list[Token]:
    return [Token(m.start(), m.end(), m.group(0), stem(m.group(0))) for m in TOKEN.finditer(text)]


@functools.lru_cache(maxsize=4096)
def stems(word: str) -> tuple[str, ...]:
    """The stems of ``word``'s tokens (cached: the same tool words and catalog values are looked up
    for every part of every request)."""
    return tuple(t.stem for t in tokens(fold(word)))


# -- counts ------------------------------------------------------------------------------------

ZH_DIGITS = {"零": 0, "一": 1, "二": 2, "两": 2, "俩": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7}
ZH_DIGITS |= {"八": 8, "九": 9}
EN_NUMBERS = {
    "once": 1, "twice": 2, "thrice": 3, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "hundred": 100, "a dozen": 12, "a couple of": 2,
}  # fmt: skip
MEASURES_ZH = "次遍轮回场把盘局个星趟"
MEASURES_EN = ("times", "time", "rounds", "round", "runs", "run", "star", "stars", "passes", "pass", "x")
_EN_MEASURE = r"(?:\s*-?\s*(?:" + "|".join(MEASURES_EN) + r")\b)?"
COUNT_PATTERNS = (
    # x3, ×3, * 3
    re.compile(r"(?<![a-z0-9])[x×*]\s*(\d{1,6})(?![0-9.])"),
    # 3x, 3 times, 3-star, 3次
    re.compile(r"(?<![a-z0-9_.])(\d{1,6})(?![0-9.])" + r"(?:\s*[" + MEASURES_ZH + r"])?" + _EN_MEASURE),
    # 三次, 十二遍, 两星 (a Chinese numeral counts only with its measure word: 一下 and 一点 are not one)
    re.compile(r"([零一二两俩三四五六七八九十百]+)\s*(?:[" + MEASURES_ZH + r"])"),
    # twice, three times, a dozen
    re.compile(r"\b(" + "|".join(sorted(EN_NUMBERS, key=len, reverse=True)) + r")\b" + _EN_MEASURE),
)


def zh_number(text: str) -> int | None:
    """三 → 3, 十二 → 12, 二十五 → 25, 一百 → 100."""
    total, current = 0, 0
    for ch in text:
        if ch in ZH_DIGITS:
            current = ZH_DIGITS[ch]
        elif ch == "十":
            total += (current or 1) * 10
            current = 0
        elif ch == "百":
            total += (current or 1) * 100
            current = 0
        else:
            return None
    return total + current


@dataclass(frozen=True, slots=True)
class Count:
    start: int
    end: int
    value: int
    # "times" when a measure says how often (3 次, x3, twice, 5 rounds): it can only be a count, never a
    # choice such as a rarity; "" otherwise (a bare number, 4 星, 4-star).
    kind: str = ""


TIMES = re.compile(r"(?:[次遍轮回把趟局场盘]|times?|rounds?|runs?|passes?|x|×|\*|once|twice|thrice)", re.I)


def counts(text: str) -> list[Count]:
    """Every count in folded ``text``, in order; overlapping readings keep the first, longest one."""
    found: list[Count] = []
    taken = bytearray(len(text))  # the characters a count already covers: overlap checks stay linear
    for index, pattern in enumerate(COUNT_PATTERNS):
        for m in pattern.finditer(text):
            raw = m.group(1)
            value = int(raw) if index < 2 else zh_number(raw) if index == 2 else EN_NUMBERS.get(raw.lower())
            if value is None:
                continue
            if any(taken[m.start() : m.end()]):
                continue
            taken[m.start() : m.end()] = b"\1" * (m.end() - m.start())
            before = text[max(0, m.start() - 2) : m.start()]
            if index == 1 and re.search(r"(?:^|[^a-z0-9])[-−]$|负$", before):
                value = -value  # "-3 times", "负三": said as negative, refused as such by the task
            start = m.start()
            if index == 2 and before.endswith("负"):
                value, start = -value, start - 1
            measure = m.group(0)[m.group(0).find(raw) + len(raw) :] if index else m.group(0)
            said_times = raw.lower() in ("once", "twice", "thrice") or TIMES.search(measure) is not None
            found.append(Count(start, m.end(), value, "times" if said_times else ""))
    return sorted(found, key=lambda c: c.start)


def numbers_in(text: str) -> list[int]:
    return [c.value for c in counts(fold(text))]


# -- words that carry no request of their own ----------------------------------------------------

FILLER_ZH = frozenset("帮给请把了的啊呀呢哦嘛吧吗哈我你咱们要想去先就都也还能来着在让一下点儿个些那这好全")
FILLER_ZH_WORDS = (
    "麻烦", "一下", "一点", "可以", "能不能", "可不可以", "能否", "现在", "马上", "立刻", "赶紧", "谢谢",
    "进行", "执行", "查看", "看看", "显示", "告诉我", "帮忙", "顺便", "然后", "接着", "所有", "全部",
    "首先", "最后", "接下来",
)  # fmt: skip
# Verbs that only say "do it" ("做日常", "搞一下", "弄完"): the tool word carries the meaning.
FILLER_ZH_VERBS = frozenset("做搞弄完查看打")
FILLER_EN = frozenset(
    """a an the my me our us for please pls plz now to of in on at it its this that these those some can
    could would will you i i'd i'm id like want wanna go let let's lets just also first up right away
    quickly quick thanks thank ok okay hey hi do does get make have with from all each more again time
    times round rounds run runs star stars pass passes tether kindly then and so be is go perform execute
    show tell see view check give every whole""".split()
)
NEGATIONS = frozenset({"不", "别", "没", "勿", "莫", "not", "don't", "dont", "never", "no", "without"})

BACKGROUND_WORDS = (
    "in the background", "background", "keep", "keep on", "nonstop", "non-stop", "continuously",
    "until stopped", "until i say stop", "forever", "afk", "loop", "looping", "on repeat",
    "后台", "一直", "挂机", "不停", "循环", "持续", "无限", "直到我说停", "直到我喊停",
)  # fmt: skip
