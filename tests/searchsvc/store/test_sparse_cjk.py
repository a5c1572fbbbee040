# ruff: noqa: RUF001 - CJK punctuation is what these tests feed the tokenizer
"""The keyword lane on Chinese, Japanese and Korean: segmented words, lemmas, dropped function words,
identifiers whole, the language read from scripts, and a CJK question matching its chunk."""

from __future__ import annotations

from kbsearch.store import cjk
from kbsearch.store.bm25 import Bm25Encoder

ENCODER = Bm25Encoder()


def dot(query: str, chunk: str) -> float:
    q, (d,) = ENCODER.encode_query(query), ENCODER.encode_chunks([chunk])
    weights = dict(zip(d.indices, d.values, strict=True))
    return sum(weights.get(i, 0.0) for i in q.indices)


def test_chinese_is_cut_into_words_with_their_search_sub_words_and_particles_dropped():
    tokens = ENCODER.tokens("Deployment 控制器负责管理副本集的滚动更新")
    assert tokens[0] == "deploy"  # English as before
    assert {"控制器", "控制", "副本", "滚动", "更新"} <= set(tokens)
    assert "的" not in tokens and "控制器负责管理副本集的滚动更新" not in tokens


def test_japanese_is_cut_into_morphemes_indexed_by_lemma_without_particles():
    tokens = ENCODER.tokens("永続ボリューム要求を使って、設定ファイルを読み込んだ")
    assert {"永続", "ボリューム", "要求", "使う", "設定", "ファイル", "読む"} <= set(tokens)
    assert not {"を", "て", "だ", "、"} & set(tokens)


def test_identifiers_and_english_inside_cjk_text_stay_as_the_english_lane_makes_them():
    tokens = ENCODER.tokens("# 設定ファイルを読み込む\nconfig = load_config(path)  # 默认路径 kube-apiserver")
    assert "load_config" in tokens and "config" in tokens and "path" in tokens
    assert "kube" in tokens and "apiserv" in tokens
    assert ENCODER.tokens("pod的日志") == ["pod", "日志"]


def test_a_run_longer_than_forty_characters_is_segmented_not_dropped():
    text = "在集群中部署应用程序之前需要先创建命名空间并配置资源配额以及网络策略然后再检查节点的状态" * 2
    assert len(text) > 40
    assert {"命名", "空间", "资源", "配额", "网络", "策略"} <= set(ENCODER.tokens(text))


def test_the_language_is_read_from_the_scripts():
    assert cjk.language("配置资源配额") == "zh"
    assert cjk.language("リソースクォータを設定する") == "ja"
    # Kanji without kana in a Japanese text is Japanese; a stray kana in Chinese text is not.
    assert cjk.language("名前空間 の 設定 は ここ です") == "ja"
    assert cjk.language("这是一个很长的中文句子，里面只有一个の字而已，其余全是汉字的内容") == "zh"
    assert not cjk.has_cjk("Kubernetes Ελληνικά русский")
    assert cjk.has_cjk("한국어") and cjk.has_hangul("ﾡ") is False and cjk.has_hangul("ㄱ")


def test_other_scripts_keep_whole_word_tokens():
    assert ENCODER.tokens("Ελληνικά русский") == ["ελληνικά", "русский"]


def test_korean_is_cut_into_content_morphemes_with_verbs_by_their_stem():
    tokens = ENCODER.tokens("영구 볼륨 클레임은 유지됩니다. 설정 파일을 수정한 뒤 다시 배포하세요")
    assert tokens == ["영구", "볼륨", "클레임", "유지", "설정", "파일", "수정", "뒤", "다시", "배포"]
    assert ENCODER.tokens("로그를 보려면") == ["로그", "보"]  # 보려면: the stem of 보다


def test_korean_is_read_in_its_line_so_a_particle_after_a_noun_is_seen_as_one():
    # Alone, "의" is a noun (a homograph); after "파드" in a sentence it is the genitive particle.
    assert ENCODER.tokens("파드의 로그를 확인") == ["파드", "로그", "확인"]
    assert ENCODER.tokens("pod의 로그") == ["pod", "로그"]
    assert ENCODER.tokens("# 설정 파일을 읽는다\nconfig = load_config(path)") == [
        "설정",
        "파일",
        "읽",
        "config",
        "load_config",
        "path",
    ]


def test_a_korean_question_scores_its_chunk_above_a_chinese_and_a_japanese_one():
    ko = "배포를 롤백하려면 kubectl rollout undo 명령으로 이전 리비전으로 되돌립니다."
    zh = "如何回滚 Deployment：使用 kubectl rollout undo 命令回滚到上一个版本。"
    assert dot("배포 롤백 방법", ko) > 0 == dot("배포 롤백 방법", zh)


def test_a_chinese_and_a_japanese_question_score_their_chunk_above_the_other():
    zh = "如何回滚 Deployment：使用 kubectl rollout undo 命令回滚到上一个版本。"
    ja = "永続ボリューム要求（PVC）はストレージを申請するためのオブジェクトです。"
    assert dot("怎么回滚部署版本", zh) > 0 == dot("怎么回滚部署版本", ja)
    assert dot("ストレージを申請する方法", ja) > 0 == dot("ストレージを申請する方法", zh)


def test_pieces_give_their_run_back():
    for run, lang in (
        ("控制器负责管理副本集的滚动更新", "zh"),
        ("永続ボリューム要求を使って", "ja"),
        ("클레임은", "ko"),
    ):
        assert "".join(p.surface for p in cjk.pieces(run, lang)) == run  # type: ignore[arg-type]
