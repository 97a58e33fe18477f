//! More llama.cpp ground truth for Gemma 3, on strings that are *not* in the shared golden
//! file: special-token edge cases (`</s>`, nested and unfinished markers, `<unused…>`),
//! long whitespace runs (longer than Gemma's longest whitespace token), CRLF, NUL/DEL, BOM,
//! combining marks, full-width forms, rare scripts that fall back to bytes, emoji with
//! modifiers and ZWJ, numbers, contractions and HTML-like tags.
//!
//! Each row was produced by llama.cpp's `llama-tokenize` (the build described in
//! `shared/golden/gemma3-270m/README.md`, which reproduces that file's 148 rows) with
//! `--ids --no-escape --log-disable [--no-bos] [--no-parse-special]` on the exact bytes of
//! `text`. Needs the default model (env `FERROX_MODEL`); without it the test says so and passes.

use ferrox_engine::tokenizer::Tokenizer;

/// `{text, add_bos, parse_special, ids}` per line.
const ROWS: &str = r##"{"text": "Hello</s>world", "add_bos": true, "parse_special": true, "ids": [2, 9259, 212, 12392]}
{"text": "Hello</s>world", "add_bos": false, "parse_special": true, "ids": [9259, 212, 12392]}
{"text": "Hello</s>world", "add_bos": false, "parse_special": false, "ids": [9259, 954, 236751, 236813, 12392]}
{"text": "<end_of_turn><start_of_turn>", "add_bos": true, "parse_special": true, "ids": [2, 106, 105]}
{"text": "<end_of_turn><start_of_turn>", "add_bos": false, "parse_special": true, "ids": [106, 105]}
{"text": "<end_of_turn><start_of_turn>", "add_bos": false, "parse_special": false, "ids": [236820, 643, 236779, 1340, 236779, 887, 1798, 3041, 236779, 1340, 236779, 887, 236813]}
{"text": "<start_of_turn>user\n<unused0>hi<mask>", "add_bos": true, "parse_special": true, "ids": [2, 105, 2364, 107, 6, 2202, 4]}
{"text": "<start_of_turn>user\n<unused0>hi<mask>", "add_bos": false, "parse_special": true, "ids": [105, 2364, 107, 6, 2202, 4]}
{"text": "<start_of_turn>user\n<unused0>hi<mask>", "add_bos": false, "parse_special": false, "ids": [236820, 3041, 236779, 1340, 236779, 887, 236813, 2364, 107, 236820, 63634, 236771, 236813, 2202, 236820, 1080, 236813]}
{"text": "<<start_of_turn>>", "add_bos": true, "parse_special": true, "ids": [2, 236820, 105, 236813]}
{"text": "<<start_of_turn>>", "add_bos": false, "parse_special": true, "ids": [236820, 105, 236813]}
{"text": "<<start_of_turn>>", "add_bos": false, "parse_special": false, "ids": [6143, 3041, 236779, 1340, 236779, 887, 6985]}
{"text": "<start_of_turn", "add_bos": true, "parse_special": true, "ids": [2, 236820, 3041, 236779, 1340, 236779, 887]}
{"text": "<start_of_turn", "add_bos": false, "parse_special": true, "ids": [236820, 3041, 236779, 1340, 236779, 887]}
{"text": "<start_of_turn", "add_bos": false, "parse_special": false, "ids": [236820, 3041, 236779, 1340, 236779, 887]}
{"text": "   <start_of_turn>   model", "add_bos": true, "parse_special": true, "ids": [2, 139, 105, 139, 4368]}
{"text": "   <start_of_turn>   model", "add_bos": false, "parse_special": true, "ids": [139, 105, 139, 4368]}
{"text": "   <start_of_turn>   model", "add_bos": false, "parse_special": false, "ids": [139, 236820, 3041, 236779, 1340, 236779, 887, 236813, 139, 4368]}
{"text": "<html><body><bos><eos><eos>", "add_bos": true, "parse_special": true, "ids": [2, 217, 218, 2, 1, 1]}
{"text": "<html><body><bos><eos><eos>", "add_bos": false, "parse_special": true, "ids": [217, 218, 2, 1, 1]}
{"text": "<html><body><bos><eos><eos>", "add_bos": false, "parse_special": false, "ids": [217, 218, 236820, 46757, 1798, 211827, 1798, 211827, 236813]}
{"text": "<start_of_image><end_of_image>[multimodal]", "add_bos": true, "parse_special": true, "ids": [2, 255999, 256000, 5]}
{"text": "<start_of_image><end_of_image>[multimodal]", "add_bos": false, "parse_special": true, "ids": [255999, 256000, 5]}
{"text": "<start_of_image><end_of_image>[multimodal]", "add_bos": false, "parse_special": false, "ids": [255999, 256000, 5]}
{"text": "<unused6241><pad>", "add_bos": true, "parse_special": true, "ids": [2, 262143, 0]}
{"text": "<unused6241><pad>", "add_bos": false, "parse_special": true, "ids": [262143, 0]}
{"text": "<unused6241><pad>", "add_bos": false, "parse_special": false, "ids": [236820, 63634, 236825, 236778, 236812, 236770, 1798, 13039, 236813]}
{"text": "   leading three", "add_bos": true, "parse_special": true, "ids": [2, 139, 26016, 1806]}
{"text": "   leading three", "add_bos": false, "parse_special": true, "ids": [139, 26016, 1806]}
{"text": "   leading three", "add_bos": false, "parse_special": false, "ids": [139, 26016, 1806]}
{"text": "                                        x", "add_bos": true, "parse_special": true, "ids": [2, 167, 145, 236781]}
{"text": "                                        x", "add_bos": false, "parse_special": true, "ids": [167, 145, 236781]}
{"text": "                                        x", "add_bos": false, "parse_special": false, "ids": [167, 145, 236781]}
{"text": "                                                                                                    ", "add_bos": true, "parse_special": true, "ids": [2, 167, 167, 167, 143]}
{"text": "                                                                                                    ", "add_bos": false, "parse_special": true, "ids": [167, 167, 167, 143]}
{"text": "                                                                                                    ", "add_bos": false, "parse_special": false, "ids": [167, 167, 167, 143]}
{"text": "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n", "add_bos": true, "parse_special": true, "ids": [2, 137, 115]}
{"text": "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n", "add_bos": false, "parse_special": true, "ids": [137, 115]}
{"text": "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n", "add_bos": false, "parse_special": false, "ids": [137, 115]}
{"text": "\t\t\t\tx", "add_bos": true, "parse_special": true, "ids": [2, 255971, 236781]}
{"text": "\t\t\t\tx", "add_bos": false, "parse_special": true, "ids": [255971, 236781]}
{"text": "\t\t\t\tx", "add_bos": false, "parse_special": false, "ids": [255971, 236781]}
{"text": " \t \n \r\n\t", "add_bos": true, "parse_special": true, "ids": [2, 236743, 255968, 236743, 107, 236743, 251, 107, 255968]}
{"text": " \t \n \r\n\t", "add_bos": false, "parse_special": true, "ids": [236743, 255968, 236743, 107, 236743, 251, 107, 255968]}
{"text": " \t \n \r\n\t", "add_bos": false, "parse_special": false, "ids": [236743, 255968, 236743, 107, 236743, 251, 107, 255968]}
{"text": "a  b   c    d     e      f", "add_bos": true, "parse_special": true, "ids": [2, 236746, 138, 236763, 139, 236755, 140, 236753, 141, 236744, 142, 236760]}
{"text": "a  b   c    d     e      f", "add_bos": false, "parse_special": true, "ids": [236746, 138, 236763, 139, 236755, 140, 236753, 141, 236744, 142, 236760]}
{"text": "a  b   c    d     e      f", "add_bos": false, "parse_special": false, "ids": [236746, 138, 236763, 139, 236755, 140, 236753, 141, 236744, 142, 236760]}
{"text": "trailing\n\n\n\n\n", "add_bos": true, "parse_special": true, "ids": [2, 136697, 111]}
{"text": "trailing\n\n\n\n\n", "add_bos": false, "parse_special": true, "ids": [136697, 111]}
{"text": "trailing\n\n\n\n\n", "add_bos": false, "parse_special": false, "ids": [136697, 111]}
{"text": "naïve café 東京タワー 😀🎉 ±∞ ≠ ≈", "add_bos": true, "parse_special": true, "ids": [2, 1789, 238527, 560, 33443, 86459, 237312, 43071, 163543, 242061, 22820, 240247, 193600, 67081]}
{"text": "naïve café 東京タワー 😀🎉 ±∞ ≠ ≈", "add_bos": false, "parse_special": true, "ids": [1789, 238527, 560, 33443, 86459, 237312, 43071, 163543, 242061, 22820, 240247, 193600, 67081]}
{"text": "naïve café 東京タワー 😀🎉 ±∞ ≠ ≈", "add_bos": false, "parse_special": false, "ids": [1789, 238527, 560, 33443, 86459, 237312, 43071, 163543, 242061, 22820, 240247, 193600, 67081]}
{"text": "x = [1,2,3];\r\n\r\n", "add_bos": true, "parse_special": true, "ids": [2, 236781, 578, 870, 236770, 236764, 236778, 236764, 236800, 2312, 251, 107, 251, 107]}
{"text": "x = [1,2,3];\r\n\r\n", "add_bos": false, "parse_special": true, "ids": [236781, 578, 870, 236770, 236764, 236778, 236764, 236800, 2312, 251, 107, 251, 107]}
{"text": "x = [1,2,3];\r\n\r\n", "add_bos": false, "parse_special": false, "ids": [236781, 578, 870, 236770, 236764, 236778, 236764, 236800, 2312, 251, 107, 251, 107]}
{"text": "12345678901234567890", "add_bos": true, "parse_special": true, "ids": [2, 236770, 236778, 236800, 236812, 236810, 236825, 236832, 236828, 236819, 236771, 236770, 236778, 236800, 236812, 236810, 236825, 236832, 236828, 236819, 236771]}
{"text": "12345678901234567890", "add_bos": false, "parse_special": true, "ids": [236770, 236778, 236800, 236812, 236810, 236825, 236832, 236828, 236819, 236771, 236770, 236778, 236800, 236812, 236810, 236825, 236832, 236828, 236819, 236771]}
{"text": "12345678901234567890", "add_bos": false, "parse_special": false, "ids": [236770, 236778, 236800, 236812, 236810, 236825, 236832, 236828, 236819, 236771, 236770, 236778, 236800, 236812, 236810, 236825, 236832, 236828, 236819, 236771]}
{"text": "👍🏽 👩🏾‍💻 🏳️‍🌈", "add_bos": true, "parse_special": true, "ids": [2, 240493, 242713, 236743, 243767, 243559, 237243, 244862, 236743, 248177, 238178, 237243, 243712]}
{"text": "👍🏽 👩🏾‍💻 🏳️‍🌈", "add_bos": false, "parse_special": true, "ids": [240493, 242713, 236743, 243767, 243559, 237243, 244862, 236743, 248177, 238178, 237243, 243712]}
{"text": "👍🏽 👩🏾‍💻 🏳️‍🌈", "add_bos": false, "parse_special": false, "ids": [240493, 242713, 236743, 243767, 243559, 237243, 244862, 236743, 248177, 238178, 237243, 243712]}
{"text": "عام ٢٠٢٤ مرحبا", "add_bos": true, "parse_special": true, "ids": [2, 81819, 130949, 241415, 241303, 242090, 150423]}
{"text": "عام ٢٠٢٤ مرحبا", "add_bos": false, "parse_special": true, "ids": [81819, 130949, 241415, 241303, 242090, 150423]}
{"text": "عام ٢٠٢٤ مرحبا", "add_bos": false, "parse_special": false, "ids": [81819, 130949, 241415, 241303, 242090, 150423]}
{"text": "ᄀᄁᄂ 한글 자모", "add_bos": true, "parse_special": true, "ids": [2, 244293, 250211, 245828, 10601, 239723, 9452, 238180]}
{"text": "ᄀᄁᄂ 한글 자모", "add_bos": false, "parse_special": true, "ids": [244293, 250211, 245828, 10601, 239723, 9452, 238180]}
{"text": "ᄀᄁᄂ 한글 자모", "add_bos": false, "parse_special": false, "ids": [244293, 250211, 245828, 10601, 239723, 9452, 238180]}
{"text": "﻿BOM text", "add_bos": true, "parse_special": true, "ids": [2, 237922, 236799, 4206, 1816]}
{"text": "﻿BOM text", "add_bos": false, "parse_special": true, "ids": [237922, 236799, 4206, 1816]}
{"text": "﻿BOM text", "add_bos": false, "parse_special": false, "ids": [237922, 236799, 4206, 1816]}
{"text": "Ω≈ç√∫˜µ≤≥÷", "add_bos": true, "parse_special": true, "ids": [2, 239995, 240443, 236999, 239176, 240842, 241700, 239407, 239485, 240260, 241055]}
{"text": "Ω≈ç√∫˜µ≤≥÷", "add_bos": false, "parse_special": true, "ids": [239995, 240443, 236999, 239176, 240842, 241700, 239407, 239485, 240260, 241055]}
{"text": "Ω≈ç√∫˜µ≤≥÷", "add_bos": false, "parse_special": false, "ids": [239995, 240443, 236999, 239176, 240842, 241700, 239407, 239485, 240260, 241055]}
{"text": "ﷺ ﷽", "add_bos": true, "parse_special": true, "ids": [2, 241078, 236743, 253375]}
{"text": "ﷺ ﷽", "add_bos": false, "parse_special": true, "ids": [241078, 236743, 253375]}
{"text": "ﷺ ﷽", "add_bos": false, "parse_special": false, "ids": [241078, 236743, 253375]}
{"text": "á̂̃ ẑ̢͖", "add_bos": true, "parse_special": true, "ids": [2, 236746, 238288, 242238, 240810, 236743, 463, 424, 383, 247685, 247678]}
{"text": "á̂̃ ẑ̢͖", "add_bos": false, "parse_special": true, "ids": [236746, 238288, 242238, 240810, 236743, 463, 424, 383, 247685, 247678]}
{"text": "á̂̃ ẑ̢͖", "add_bos": false, "parse_special": false, "ids": [236746, 238288, 242238, 240810, 236743, 463, 424, 383, 247685, 247678]}
{"text": "www.example.com/über?x=1&y=2#top", "add_bos": true, "parse_special": true, "ids": [2, 2769, 236761, 8358, 236761, 854, 236786, 28223, 236881, 236781, 236784, 236770, 236880, 236762, 236784, 236778, 236865, 3991]}
{"text": "www.example.com/über?x=1&y=2#top", "add_bos": false, "parse_special": true, "ids": [2769, 236761, 8358, 236761, 854, 236786, 28223, 236881, 236781, 236784, 236770, 236880, 236762, 236784, 236778, 236865, 3991]}
{"text": "www.example.com/über?x=1&y=2#top", "add_bos": false, "parse_special": false, "ids": [2769, 236761, 8358, 236761, 854, 236786, 28223, 236881, 236781, 236784, 236770, 236880, 236762, 236784, 236778, 236865, 3991]}
{"text": "def f():\n\tif x:\n\t\treturn 1\n        pass", "add_bos": true, "parse_special": true, "ids": [2, 2063, 517, 6141, 107, 255968, 584, 1123, 236787, 107, 255969, 2060, 236743, 236770, 107, 144, 4373]}
{"text": "def f():\n\tif x:\n\t\treturn 1\n        pass", "add_bos": false, "parse_special": true, "ids": [2063, 517, 6141, 107, 255968, 584, 1123, 236787, 107, 255969, 2060, 236743, 236770, 107, 144, 4373]}
{"text": "def f():\n\tif x:\n\t\treturn 1\n        pass", "add_bos": false, "parse_special": false, "ids": [2063, 517, 6141, 107, 255968, 584, 1123, 236787, 107, 255969, 2060, 236743, 236770, 107, 144, 4373]}
{"text": "ALL NBSP EMSPACE　IDEO", "add_bos": true, "parse_special": true, "ids": [2, 7602, 432, 398, 236797, 179563, 464, 366, 369, 3158, 51448, 465, 366, 366, 1735, 6864]}
{"text": "ALL NBSP EMSPACE　IDEO", "add_bos": false, "parse_special": true, "ids": [7602, 432, 398, 236797, 179563, 464, 366, 369, 3158, 51448, 465, 366, 366, 1735, 6864]}
{"text": "ALL NBSP EMSPACE　IDEO", "add_bos": false, "parse_special": false, "ids": [7602, 432, 398, 236797, 179563, 464, 366, 369, 3158, 51448, 465, 366, 366, 1735, 6864]}
{"text": "pneumonoultramicroscopicsilicovolcanoconiosis", "add_bos": true, "parse_special": true, "ids": [2, 214016, 498, 194300, 1043, 2784, 1166, 650, 1229, 40390, 46259, 4881, 21252, 55951]}
{"text": "pneumonoultramicroscopicsilicovolcanoconiosis", "add_bos": false, "parse_special": true, "ids": [214016, 498, 194300, 1043, 2784, 1166, 650, 1229, 40390, 46259, 4881, 21252, 55951]}
{"text": "pneumonoultramicroscopicsilicovolcanoconiosis", "add_bos": false, "parse_special": false, "ids": [214016, 498, 194300, 1043, 2784, 1166, 650, 1229, 40390, 46259, 4881, 21252, 55951]}
{"text": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "add_bos": true, "parse_special": true, "ids": [2, 128820, 128820, 128820, 128820, 128820]}
{"text": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "add_bos": false, "parse_special": true, "ids": [128820, 128820, 128820, 128820, 128820]}
{"text": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "add_bos": false, "parse_special": false, "ids": [128820, 128820, 128820, 128820, 128820]}
{"text": "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!", "add_bos": true, "parse_special": true, "ids": [2, 213253, 213253]}
{"text": "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!", "add_bos": false, "parse_special": true, "ids": [213253, 213253]}
{"text": "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!", "add_bos": false, "parse_special": false, "ids": [213253, 213253]}
{"text": "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３", "add_bos": true, "parse_special": true, "ids": [2, 241712, 244305, 243317, 243317, 241038, 242749, 244118, 242832, 244367, 236743, 239549, 241577, 240847, 236743, 238254, 238540, 238995]}
{"text": "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３", "add_bos": false, "parse_special": true, "ids": [241712, 244305, 243317, 243317, 241038, 242749, 244118, 242832, 244367, 236743, 239549, 241577, 240847, 236743, 238254, 238540, 238995]}
{"text": "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３", "add_bos": false, "parse_special": false, "ids": [241712, 244305, 243317, 243317, 241038, 242749, 244118, 242832, 244367, 236743, 239549, 241577, 240847, 236743, 238254, 238540, 238995]}
{"text": "ÀÁÂÃÄÅÆÇÈÉÊËÌÍÎÏÐÑÒÓÔÕÖ×ØÙÚÛÜÝÞß", "add_bos": true, "parse_special": true, "ids": [2, 238974, 238291, 239075, 239293, 239122, 239685, 241606, 238416, 239344, 237642, 240930, 243362, 241898, 238999, 239259, 241930, 241717, 240643, 243197, 238870, 240543, 241985, 238255, 237858, 240224, 243324, 239403, 242516, 238194, 241991, 241727, 237435]}
{"text": "ÀÁÂÃÄÅÆÇÈÉÊËÌÍÎÏÐÑÒÓÔÕÖ×ØÙÚÛÜÝÞß", "add_bos": false, "parse_special": true, "ids": [238974, 238291, 239075, 239293, 239122, 239685, 241606, 238416, 239344, 237642, 240930, 243362, 241898, 238999, 239259, 241930, 241717, 240643, 243197, 238870, 240543, 241985, 238255, 237858, 240224, 243324, 239403, 242516, 238194, 241991, 241727, 237435]}
{"text": "ÀÁÂÃÄÅÆÇÈÉÊËÌÍÎÏÐÑÒÓÔÕÖ×ØÙÚÛÜÝÞß", "add_bos": false, "parse_special": false, "ids": [238974, 238291, 239075, 239293, 239122, 239685, 241606, 238416, 239344, 237642, 240930, 243362, 241898, 238999, 239259, 241930, 241717, 240643, 243197, 238870, 240543, 241985, 238255, 237858, 240224, 243324, 239403, 242516, 238194, 241991, 241727, 237435]}
{"text": "Это тест. Ceci est un test. Dies ist ein Test.", "add_bos": true, "parse_special": true, "ids": [2, 56461, 163507, 236761, 150128, 1009, 723, 1594, 236761, 16525, 3526, 2535, 5803, 236761]}
{"text": "Это тест. Ceci est un test. Dies ist ein Test.", "add_bos": false, "parse_special": true, "ids": [56461, 163507, 236761, 150128, 1009, 723, 1594, 236761, 16525, 3526, 2535, 5803, 236761]}
{"text": "Это тест. Ceci est un test. Dies ist ein Test.", "add_bos": false, "parse_special": false, "ids": [56461, 163507, 236761, 150128, 1009, 723, 1594, 236761, 16525, 3526, 2535, 5803, 236761]}
{"text": "𐍈𐌰𐌹 𓀀𓀁 🀄🃏", "add_bos": true, "parse_special": true, "ids": [2, 478, 382, 379, 374, 478, 382, 378, 414, 478, 382, 378, 423, 236743, 478, 385, 366, 366, 478, 385, 366, 367, 236743, 478, 397, 366, 370, 251732]}
{"text": "𐍈𐌰𐌹 𓀀𓀁 🀄🃏", "add_bos": false, "parse_special": true, "ids": [478, 382, 379, 374, 478, 382, 378, 414, 478, 382, 378, 423, 236743, 478, 385, 366, 366, 478, 385, 366, 367, 236743, 478, 397, 366, 370, 251732]}
{"text": "𐍈𐌰𐌹 𓀀𓀁 🀄🃏", "add_bos": false, "parse_special": false, "ids": [478, 382, 379, 374, 478, 382, 378, 414, 478, 382, 378, 423, 236743, 478, 385, 366, 366, 478, 385, 366, 367, 236743, 478, 397, 366, 370, 251732]}
{"text": "\u0000nulldel", "add_bos": true, "parse_special": true, "ids": [2, 238, 6455, 251541, 7796]}
{"text": "\u0000nulldel", "add_bos": false, "parse_special": true, "ids": [238, 6455, 251541, 7796]}
{"text": "\u0000nulldel", "add_bos": false, "parse_special": false, "ids": [238, 6455, 251541, 7796]}
{"text": "tab\tend\t", "add_bos": true, "parse_special": true, "ids": [2, 4823, 255968, 643, 255968]}
{"text": "tab\tend\t", "add_bos": false, "parse_special": true, "ids": [4823, 255968, 643, 255968]}
{"text": "tab\tend\t", "add_bos": false, "parse_special": false, "ids": [4823, 255968, 643, 255968]}
{"text": "Mr. O'Neil's dog—it's “quoted” ‘text’… ok?", "add_bos": true, "parse_special": true, "ids": [2, 7978, 236761, 708, 236789, 70955, 236789, 236751, 4799, 237028, 509, 236789, 236751, 999, 148758, 236919, 2141, 1005, 236858, 237064, 7546, 236881]}
{"text": "Mr. O'Neil's dog—it's “quoted” ‘text’… ok?", "add_bos": false, "parse_special": true, "ids": [7978, 236761, 708, 236789, 70955, 236789, 236751, 4799, 237028, 509, 236789, 236751, 999, 148758, 236919, 2141, 1005, 236858, 237064, 7546, 236881]}
{"text": "Mr. O'Neil's dog—it's “quoted” ‘text’… ok?", "add_bos": false, "parse_special": false, "ids": [7978, 236761, 708, 236789, 70955, 236789, 236751, 4799, 237028, 509, 236789, 236751, 999, 148758, 236919, 2141, 1005, 236858, 237064, 7546, 236881]}
{"text": "<start_of_turn>system\nYou are helpful.<end_of_turn>\n<start_of_turn>user\nHi there!<end_of_turn>\n<start_of_turn>model\n", "add_bos": true, "parse_special": true, "ids": [2, 105, 9731, 107, 3048, 659, 11045, 236761, 106, 107, 105, 2364, 107, 10979, 993, 236888, 106, 107, 105, 4368, 107]}
{"text": "<start_of_turn>system\nYou are helpful.<end_of_turn>\n<start_of_turn>user\nHi there!<end_of_turn>\n<start_of_turn>model\n", "add_bos": false, "parse_special": true, "ids": [105, 9731, 107, 3048, 659, 11045, 236761, 106, 107, 105, 2364, 107, 10979, 993, 236888, 106, 107, 105, 4368, 107]}
{"text": "<start_of_turn>system\nYou are helpful.<end_of_turn>\n<start_of_turn>user\nHi there!<end_of_turn>\n<start_of_turn>model\n", "add_bos": false, "parse_special": false, "ids": [236820, 3041, 236779, 1340, 236779, 887, 236813, 9731, 107, 3048, 659, 11045, 21603, 643, 236779, 1340, 236779, 887, 236813, 107, 236820, 3041, 236779, 1340, 236779, 887, 236813, 2364, 107, 10979, 993, 200322, 643, 236779, 1340, 236779, 887, 236813, 107, 236820, 3041, 236779, 1340, 236779, 887, 236813, 4368, 107]}
{"text": "1,000,000.50 $ € £ ¥ ₹ 50% 3/4", "add_bos": true, "parse_special": true, "ids": [2, 236770, 236764, 236771, 236771, 236771, 236764, 236771, 236771, 236771, 236761, 236810, 236771, 609, 11361, 6903, 79524, 31386, 236743, 236810, 236771, 236908, 236743, 236800, 236786, 236812]}
{"text": "1,000,000.50 $ € £ ¥ ₹ 50% 3/4", "add_bos": false, "parse_special": true, "ids": [236770, 236764, 236771, 236771, 236771, 236764, 236771, 236771, 236771, 236761, 236810, 236771, 609, 11361, 6903, 79524, 31386, 236743, 236810, 236771, 236908, 236743, 236800, 236786, 236812]}
{"text": "1,000,000.50 $ € £ ¥ ₹ 50% 3/4", "add_bos": false, "parse_special": false, "ids": [236770, 236764, 236771, 236771, 236771, 236764, 236771, 236771, 236771, 236761, 236810, 236771, 609, 11361, 6903, 79524, 31386, 236743, 236810, 236771, 236908, 236743, 236800, 236786, 236812]}
{"text": "I'M YOU'RE WE'VE THEY'LL HE'D", "add_bos": true, "parse_special": true, "ids": [2, 236777, 236789, 236792, 19786, 236789, 1357, 19716, 236789, 11818, 98321, 236789, 2182, 13962, 236789, 236796]}
{"text": "I'M YOU'RE WE'VE THEY'LL HE'D", "add_bos": false, "parse_special": true, "ids": [236777, 236789, 236792, 19786, 236789, 1357, 19716, 236789, 11818, 98321, 236789, 2182, 13962, 236789, 236796]}
{"text": "I'M YOU'RE WE'VE THEY'LL HE'D", "add_bos": false, "parse_special": false, "ids": [236777, 236789, 236792, 19786, 236789, 1357, 19716, 236789, 11818, 98321, 236789, 2182, 13962, 236789, 236796]}
{"text": "<b>bold</b> <i>it</i> <div class=\"a\"> </div>", "add_bos": true, "parse_special": true, "ids": [2, 200, 15640, 209, 236743, 201, 509, 210, 655, 1928, 1012, 718, 236746, 905, 236743, 235]}
{"text": "<b>bold</b> <i>it</i> <div class=\"a\"> </div>", "add_bos": false, "parse_special": true, "ids": [200, 15640, 209, 236743, 201, 509, 210, 655, 1928, 1012, 718, 236746, 905, 236743, 235]}
{"text": "<b>bold</b> <i>it</i> <div class=\"a\"> </div>", "add_bos": false, "parse_special": false, "ids": [200, 15640, 209, 236743, 201, 509, 210, 655, 1928, 1012, 718, 236746, 905, 236743, 235]}
{"text": "    \n    \n", "add_bos": true, "parse_special": true, "ids": [2, 140, 107, 140, 107]}
{"text": "    \n    \n", "add_bos": false, "parse_special": true, "ids": [140, 107, 140, 107]}
{"text": "    \n    \n", "add_bos": false, "parse_special": false, "ids": [140, 107, 140, 107]}
{"text": "  \n", "add_bos": true, "parse_special": true, "ids": [2, 138, 107]}
{"text": "  \n", "add_bos": false, "parse_special": true, "ids": [138, 107]}
{"text": "  \n", "add_bos": false, "parse_special": false, "ids": [138, 107]}
{"text": "\n ", "add_bos": true, "parse_special": true, "ids": [2, 107, 236743]}
{"text": "\n ", "add_bos": false, "parse_special": true, "ids": [107, 236743]}
{"text": "\n ", "add_bos": false, "parse_special": false, "ids": [107, 236743]}
{"text": "ok                                 done", "add_bos": true, "parse_special": true, "ids": [2, 680, 167, 138, 18450]}
{"text": "ok                                 done", "add_bos": false, "parse_special": true, "ids": [680, 167, 138, 18450]}
{"text": "ok                                 done", "add_bos": false, "parse_special": false, "ids": [680, 167, 138, 18450]}
"##;

fn load() -> Option<Tokenizer> {
    let path = ferrox_engine::cache::model_for_tests()?;
    let f = ferrox_gguf::GgufFile::open(&path).expect("open model");
    Some(Tokenizer::from_gguf(&f).expect("load tokenizer"))
}

#[test]
fn unseen_strings_match_llama_cpp() {
    let Some(tok) = load() else { return };
    let mut failures = Vec::new();
    let mut n = 0;
    for line in ROWS.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).expect("valid JSON line");
        let text = v["text"].as_str().expect("text");
        let add_bos = v["add_bos"].as_bool().expect("add_bos");
        let parse_special = v["parse_special"].as_bool().expect("parse_special");
        let want: Vec<u32> = v["ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|x| x.as_u64().expect("id") as u32)
            .collect();
        let got = tok.encode(text, add_bos, parse_special);
        if got != want {
            failures.push(format!(
                "text={text:?} add_bos={add_bos} parse_special={parse_special}\n  want {want:?}\n  got  {got:?}"
            ));
        }
        // Whatever the split, rendering every token gives the text back.
        let body = if add_bos { &got[1..] } else { &got[..] };
        assert_eq!(tok.decode_special(body), text);
        n += 1;
    }
    assert_eq!(n, 144);
    println!("{} passed, {} failed", n - failures.len(), failures.len());
    assert!(
        failures.is_empty(),
        "{} rows differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
