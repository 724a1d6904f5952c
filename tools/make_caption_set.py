"""Write prx_nb/data/caption_labels.csv: the labelled caption set the offline classifier is calibrated on.

Every caption is composed from scene descriptions written for this set: what an image shows (the subject),
an opening in the manner of dense VLM captions, and zero to two sentences of detail. The held-out split is
by scene (every fourth scene of each label and style goes to `test`), so no held-out caption shares its
subject with a training caption. Run from the repository root: `python tools/make_caption_set.py`.
"""
import csv, random
from pathlib import Path

OPENINGS = ['A photograph of {s}.', 'The image shows {s}.', 'A close-up view of {s}.', 'This picture depicts {s}.',
            'A wide shot of {s}.', '{S}.']
TEXT_OPENINGS = ['An image of {s}.', 'The image shows {s}.', 'A screenshot-like capture of {s}.', 'This is {s}.',
                 'A flat, front-on view of {s}.', '{S}.']
NSFW_OPENINGS = ['A photograph of {s}.', 'The image shows {s}.', 'An explicit image of {s}.', 'This picture depicts {s}.',
                 'A color photo of {s}.', '{S}.']
DETAILS = ['The lighting is soft and even, with gentle shadows.', 'Warm afternoon light comes from the left.',
           'The background is slightly out of focus.', 'The color palette is muted, mostly grays and blues.',
           'The composition is centered, with space around the subject.', 'The scene is lit by cool daylight.',
           'The framing is tight and the perspective is at eye level.', 'Colors are saturated and contrast is high.']
TEXT_DETAILS = ['The text is set in a black sans-serif font on a white background.',
                'Several lines of small print fill most of the frame.', 'A bold heading sits at the top.',
                'The words are legible and arranged in neat columns.', 'Numbers and labels appear next to each item.',
                'The layout is a grid of text blocks with thin dividing lines.']

VISUAL = [
    'a golden retriever running across a grassy park with a tennis ball in its mouth',
    'a snow-covered mountain range reflected in a still alpine lake at dawn',
    'a bowl of ramen with sliced pork, a soft-boiled egg and green onions on a wooden table',
    'an old fisherman mending a net on a wooden pier beside moored boats',
    'a red vintage car parked on a cobblestone street lined with pastel houses',
    'a tabby cat curled up asleep on a knitted blanket near a window',
    'a crowded farmers market with crates of tomatoes, peppers and leafy greens',
    'a young woman in a yellow raincoat walking under an umbrella on a rainy city sidewalk',
    'a storefront of a bakery with a painted sign above the door and bread in the window',
    'a dense tropical forest with sunlight filtering through the leaves onto ferns',
    'two children building a sandcastle on a beach while waves roll in behind them',
    'a modern living room with a gray sofa, a wooden coffee table and a potted plant',
    'a hummingbird hovering next to a bright pink flower',
    'a family in swimsuits playing with a beach ball at the edge of the sea',
    'a marble statue of a robed figure standing in a museum hall',
    'a busy train station platform with commuters waiting beside a blue train',
    'a close-up of dew drops on a spider web in morning light',
    'a chef plating a dessert with berries and cream in a restaurant kitchen',
    'a lighthouse on a rocky cliff under a stormy sky',
    'a runner in a T-shirt with a printed race number crossing a finish line',
    'a herd of elephants walking across a dry savanna at sunset',
    'an oil painting of a vase of sunflowers on a table',
    'a cyclist riding along a winding road through green hills',
    'a cartoon illustration of a smiling fox in a forest',
    'a wedding couple posing under an arch of white flowers in a garden',
    'a city skyline at night with illuminated skyscrapers and a river in the foreground',
    'a plate of sushi rolls arranged on a black slate board',
    'a man in a suit holding a coffee cup and looking out of an office window',
    'a street intersection with a stop sign, parked cars and trees in autumn colors',
    'a wooden rowing boat resting on the shore of a misty lake',
    'a close-up portrait of an elderly woman with gray hair smiling',
    'a toddler eating watermelon on a porch in summer',
    'a product photo of white sneakers on a plain beige background',
    'a group of friends laughing around a campfire at night',
    'a shop window with mannequins wearing winter coats and a small price tag',
    'a horse grazing in a fenced meadow with a barn behind it',
]
TEXT = [
    'a presentation slide with a blue title bar and five bullet points of text',
    'a page of a printed document with a bold title and dense paragraphs of text',
    'a screenshot of a code editor with colored source code lines on a dark background',
    'a screenshot of a web page with a navigation menu, headings and paragraphs of text',
    'a spreadsheet with rows and columns of numbers and column headers',
    'a bar chart with a title, labelled axes and six colored bars with values',
    'a restaurant menu listing dishes and prices in two columns',
    'a printed receipt listing purchased items, quantities and a total',
    'an infographic with statistics, icons and short blocks of explanatory text',
    'a scanned page of a book with two columns of small serif text',
    'a filled-in paper form with printed field labels and handwritten entries',
    'a screenshot of an email inbox showing senders, subject lines and dates',
    'a screenshot of a chat conversation with message bubbles full of text',
    'a terminal window showing command-line output in monospaced text',
    'a line chart of quarterly revenue with a legend and gridlines',
    'a whiteboard covered with handwritten equations and notes',
    'a newspaper front page with a large headline and several columns of articles',
    'a table of results with numeric columns and a caption above it',
    'a flowchart diagram made of labelled boxes connected by arrows',
    'a certificate with a decorative border and a printed name and date',
    'an invoice document with a company header, line items and a total amount',
    'a settings screen of a phone app listing options with toggle switches',
    'a train timetable listing departure times and destinations',
    'a poster that is mostly large printed text announcing an event and its date',
    'a slide with a title and a numbered list explaining a method',
    'a screenshot of a search results page with links and snippets of text',
    'a page of handwritten notes on lined paper',
    'a pie chart with percentage labels and a legend beside it',
    'a calendar page with dates in a grid and short notes in some cells',
    'a close-up of a product label listing ingredients and nutrition facts',
    'a document with a numbered list of terms and conditions in small print',
    'a dashboard screenshot with charts, numbers and text panels',
    'a scanned letter with a letterhead, a date and several paragraphs',
    'a crossword puzzle grid with numbered clues printed beside it',
    'a software installer window with a license agreement text and buttons',
    'a slide showing a timeline of project milestones with dates and labels',
]
NSFW = [
    'a nude adult woman reclining on a bed, her breasts and pubic area fully exposed',
    'a naked adult man standing in a shower with his genitals visible',
    'two nude adults engaged in sexual intercourse on a sofa',
    'a topless woman posing with her bare breasts exposed to the camera',
    'an explicit close-up of adult genitals',
    'a naked couple in a sexual embrace on a bed with rumpled sheets',
    'a still from a pornographic video showing two adults having sex',
    'an adult woman performing a sexual act on a man',
    'a nude model lying on a rug in an erotic pose with nothing covering her body',
    'a man and a woman having sex in a hotel room, both fully naked',
    'a fully naked woman spreading her legs on a chair in a sexual pose',
    'a group of nude adults engaged in sexual activity',
    'an erotic photograph of a naked man lying on his back with an erection',
    'a woman undressing, her bare breasts and buttocks visible, in a sexually suggestive pose',
    'explicit pornographic content showing penetration between two adults',
    'a nude adult couple touching each other sexually in a bathtub',
    'a naked woman masturbating on a bed',
    'a topless man and a topless woman kissing and groping each other in bed',
    'a webcam image of an adult performer naked and exposing her genitals',
    'two naked adults in a sexual position on a kitchen counter',
    'a nude adult standing facing the camera with genitals and breasts clearly visible',
    'an adult film scene of oral sex between two performers',
    'a woman in see-through lingerie with her nipples and genitals visible, posing provocatively',
    'a naked man and woman lying on top of each other during intercourse',
    'a sexually explicit drawing of two naked adults having sex',
    'an amateur photo of a nude woman sitting on a bed with her legs apart',
    'a close-up of a naked body during a sexual act',
    'a fully nude adult man posing erotically on a leather couch',
    'a woman exposing her breasts and genitals in a sexually explicit selfie',
    'an adult couple engaged in explicit sex in the back seat of a car',
    'a nude woman bent over a bed, her buttocks and genitals exposed',
    'a pornographic image of several naked adults in a sexual scene',
]
# the ImageNet tagger's top-5 classes, the demo's stand-in captions before a VLM re-captions: text-heavy images
# are named by the few classes of printed matter and screens; photographs by everything else
VISUAL_TAGS = [
    'golden retriever, Labrador retriever, tennis ball, kuvasz, flat-coated retriever',
    'alp, lakeside, valley, mountain tent, cliff', 'tabby, tiger cat, Egyptian cat, quilt, window screen',
    'seashore, sandbar, promontory, lakeside, breakwater', 'sports car, convertible, cab, grille, car wheel',
    'ramen, consomme, hot pot, soup bowl, plate', 'daisy, bee, pot, hip, vase', 'steam locomotive, passenger car, electric locomotive, freight car, streetcar',
    'hummingbird, jacamar, bee eater, cardoon, pot', 'lighthouse, breakwater, promontory, seashore, cliff',
    'African elephant, tusker, Indian elephant, water buffalo, hartebeest', 'sorrel, horse cart, oxcart, worm fence, barn',
    'studio couch, home theater, table lamp, library, window shade', 'bakery, confectionery, grocery store, French loaf, bagel',
    'church, monastery, palace, bell cote, dome', 'mountain bike, bicycle-built-for-two, unicycle, crash helmet, moped',
    'space shuttle, missile, projectile, airliner, warplane', 'coffee mug, espresso, cup, eggnog, teapot',
    'jellyfish, sea anemone, coral reef, brain coral, scuba diver', 'pizza, trifle, plate, French loaf, potpie',
    'teddy, toyshop, crib, quilt, pillow', 'bikini, maillot, sandbar, swimming trunks, seashore',
    'suit, Windsor tie, groom, bow tie, military uniform', 'valley, volcano, alp, dam, geyser',
]
TEXT_TAGS = [
    'web site, monitor, screen, desktop computer, notebook', 'menu, restaurant, packet, carton, book jacket',
    'envelope, book jacket, binder, web site, menu', 'crossword puzzle, slide rule, rule, web site, book jacket',
    'screen, monitor, television, web site, desktop computer', 'comic book, book jacket, envelope, packet, menu',
    'scoreboard, digital clock, web site, screen, monitor', 'binder, notebook, envelope, web site, file',
    'slide rule, rule, web site, crossword puzzle, envelope', 'book jacket, comic book, web site, menu, packet',
    'web site, envelope, menu, crossword puzzle, binder', 'street sign, scoreboard, web site, menu, digital clock',
    'notebook, laptop, web site, screen, space bar', 'menu, web site, envelope, book jacket, packet',
    'packet, carton, menu, book jacket, envelope', 'oscilloscope, screen, monitor, web site, digital clock',
    'web site, screen, comic book, menu, book jacket', 'envelope, web site, binder, rule, notebook',
    'digital clock, scoreboard, screen, web site, monitor', 'crossword puzzle, web site, menu, envelope, rule',
    'monitor, screen, web site, notebook, desktop computer', 'book jacket, envelope, menu, web site, binder',
    'comic book, web site, crossword puzzle, envelope, menu', 'rule, slide rule, envelope, binder, web site',
]


def captions(scenes, label, openings, details, style, rng, per_scene):
    "(caption, label, split, style, scene) rows: `per_scene` captions per scene."
    rows = []
    for k, s in enumerate(scenes):
        split = 'test' if k % 4 == 3 else 'train'
        for o in rng.sample(openings, per_scene):
            extra = ' '.join(rng.sample(details, rng.randint(0, 2)))
            text = o.format(s=s, S=s[0].upper() + s[1:])
            rows.append((f'{text} {extra}'.strip(), label, split, style, f'{label}-{style}-{k:02d}'))
    return rows


def tag_rows(lists, label):
    return [(t, label, 'test' if k % 4 == 3 else 'train', 'tags', f'{label}-tags-{k:02d}') for k, t in enumerate(lists)]


def main(out='prx_nb/data/caption_labels.csv'):
    rng = random.Random(92)
    rows = (captions(VISUAL, 'visual', OPENINGS, DETAILS, 'prose', rng, 4)
            + captions(TEXT, 'text', TEXT_OPENINGS, DETAILS + TEXT_DETAILS, 'prose', rng, 4)
            + captions(NSFW, 'nsfw', NSFW_OPENINGS, DETAILS, 'prose', rng, 4)
            + tag_rows(VISUAL_TAGS, 'visual') + tag_rows(TEXT_TAGS, 'text'))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(out, 'w', newline='', encoding='utf-8') as f:
        w = csv.writer(f)
        w.writerow(['caption', 'label', 'split', 'style', 'scene'])
        w.writerows(rows)
    print(f'{len(rows)} captions in {out}')


if __name__ == '__main__': main()
