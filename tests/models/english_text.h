// A fixed passage of plain English prose (written for this repository, ASCII, about 4.7 KB) for tests
// that feed real text bytes to the byte-vocabulary fixtures: the same ids on every machine, with no
// dependency on the text library (the GPU machine builds without it).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace deltabit::test {

inline constexpr std::string_view kEnglishText = R"(The harbour town woke slowly in winter. Before the first ferry left, the baker on the corner had already sold most of his rye loaves to the men who worked the cranes, and the smell of bread drifted down the steep street toward the water. Gulls argued over the fish market roofs. A boy with a red scarf pushed a handcart of newspapers past the chandlery, where coils of rope hung like sleeping snakes in the window, and the owner, a tall woman named Marta, waved at him without looking up from her ledger.

Nobody in the town could remember when the lighthouse keeper had last been seen at the inn. He was said to be writing a history of the coast, a book that would list every wreck since the old charts were drawn, with the names of the ships, the weather on the night they were lost, and the families who waited for news that never came. Some people thought the book was an excuse to be left alone. Others believed he had found something in the records that he did not want to share until he was certain.

At nine o'clock the library opened, and the first visitor was always the same retired teacher, who read the weather reports from three newspapers and compared them in a small notebook. He kept score. Over eleven years, he said, the paper from the capital had been right about rain on sixty-two days out of every hundred, while the local paper, written by a man who simply looked out of his window, was right on seventy. He liked to tell this to anyone who would listen, and then he would laugh and say that numbers were only honest when nobody was paid to produce them.

The ferry crossing took forty minutes on a calm day and nearly twice that when the wind came from the north. Passengers who had made the trip many times sat inside near the heaters and did crosswords; visitors stood at the rail and took photographs of the cliffs, which changed colour as the clouds moved, from grey to a warm orange and back again. Halfway across there was a rock with a single iron post on it, and children always asked what it was for. The crew gave a different answer every time: a mooring for giants, a place where mermaids paid their taxes, a marker left by a sailor who had buried his fortune and forgotten where.

In the afternoons the market square filled with stalls. There were apples from the valley farms, cheeses wrapped in cloth, knitted hats, jars of honey, and a man who repaired clocks while his customers waited. He worked with a magnifying glass fixed to his spectacles and never spoke while a mechanism was open in front of him. When he closed the case and wound the key, he would hold the clock to his ear for a long moment, nod once, and name a price that was always lower than people expected. He said that a clock which kept good time was its own reward, and that he charged only for the pleasure of listening to it.

Evenings belonged to the inn. Fishermen came in with salt still drying on their jackets, and the conversation turned, as it always did, to prices, to the weather, and to the council's latest plan for the old warehouse by the quay. Some wanted a museum; others wanted flats for young families who could no longer afford to live in the town where they had grown up. The debate had lasted four years. In that time the warehouse roof had lost half its slates, a family of owls had moved into the loft, and a group of students had painted a mural of the harbour on its seaward wall, which everyone agreed was the best thing to happen to the building in a century.

Late one night in February, a storm pulled the power lines down along the coast road. The town went dark except for the lighthouse, whose beam swept over the roofs as it had for a hundred and thirty years. People lit candles and found that they did not mind very much. They played cards, told stories, and listened to the wind. In the morning the keeper was seen walking along the harbour wall for the first time in months, carrying a thick folder under his arm. He went straight to the library, asked the librarian for a table near the window, and began to read aloud from the first page to anyone who cared to listen.

By noon the room was full. He read about a schooner that had struck the reef in a fog and whose cargo of oranges had washed up on the beach for a week, so that for a while every child in the town had orange fingers. He read about a lifeboat crew who rowed out four times in one night and brought back nineteen people, and about a cook who had saved a ship's cat by tucking it inside his coat. The teacher with the notebook stopped writing and simply listened. When the keeper closed the folder at last, nobody spoke for a moment, and then the baker, who had left his shop to come and hear, asked whether there would be a second volume.)";

// The passage's bytes as token ids of a byte vocabulary, the passage repeated as needed to fill n.
inline std::vector<int32_t> english_text_ids(size_t n) {
    std::vector<int32_t> ids(n);
    for (size_t i = 0; i < n; ++i) ids[i] = int32_t(static_cast<unsigned char>(kEnglishText[i % kEnglishText.size()]));
    return ids;
}

}  // namespace deltabit::test
